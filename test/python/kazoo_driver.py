#!/usr/bin/python3
#
# kazoo_driver.py
#    A peer for zklock's interoperability tests (test/t/050_interop.pl,
#    066_kinds_interop.pl): Kazoo's Lock, WriteLock and ReadLock, by default
#    constructed with extra_lock_patterns=["-lock-"] so that they order
#    Curator-style nodes (zklock's exclusive lock) with their own, and
#    Counter(support_curator=True) (test/t/104_shared_count.pl), driven
#    line by line on standard input.
#
# Usage: /usr/bin/python3 kazoo_driver.py CONNECT
#
# Prints "ready" once its session is connected.  Then every input line is
# "TAG COMMAND [ARGS]" and gets exactly one answer line "TAG RESULT", where
# RESULT is "ok", "timeout" or "error <exception>".  Each TAG is one holder
# with its own thread: commands of one tag run in order, commands of
# different tags concurrently.
#
#   TAG lock-acquire PATH TIMEOUT_MS [PATTERNS]
#                                      Lock(PATH).acquire: TIMEOUT_MS 0 is
#                                      blocking=False, < 0 waits without
#                                      limit, > 0 is timeout=TIMEOUT_MS/1000;
#                                      PATTERNS: extra_lock_patterns, comma
#                                      separated ("-lock-" if not given,
#                                      "none" for none)
#   TAG wlock-acquire PATH TIMEOUT_MS [PATTERNS]
#                                      the same with WriteLock(PATH)
#   TAG rlock-acquire PATH TIMEOUT_MS [PATTERNS]
#                                      the same with ReadLock(PATH)
#   TAG lock-release                   release what the tag holds
#   TAG counter-get PATH               "ok VALUE": Counter(PATH,
#                                      support_curator=True).value
#   TAG counter-add PATH DELTA         "ok PRE POST": the same counter += DELTA,
#                                      its pre_value and post_value
#   quit                               close the session and exit
#
# End of input counts as quit.

import logging
import queue
import sys
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout, NoNodeError

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
log = logging.getLogger("kazoo_driver")

out_lock = threading.Lock()


def answer(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Holder:
    """One tag: a thread running the tag's commands in order."""

    def __init__(self, zk, tag):
        self.zk = zk
        self.tag = tag
        self.lock = None
        self.commands = queue.Queue()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while True:
            words = self.commands.get()
            try:
                result = self.run(words)
            except Exception as e:  # reported, not fatal
                result = "error %s: %s" % (type(e).__name__, e)
            answer("%s %s" % (self.tag, " ".join(str(result).split())))

    def run(self, words):
        cmd = words[0]
        recipes = {
            "lock-acquire": self.zk.Lock,
            "wlock-acquire": self.zk.WriteLock,
            "rlock-acquire": self.zk.ReadLock,
        }
        if cmd in recipes:
            path, ms = words[1], int(words[2])
            patterns = words[3] if len(words) > 3 else "-lock-"
            patterns = [] if patterns == "none" else patterns.split(",")
            for attempt in range(5):
                # A fresh Lock per acquire: a Lock remembers that it made
                # sure of its parent, and zklock and Curator create parents
                # as CONTAINER nodes, which ZooKeeper deletes once they are
                # empty; an old Lock then fails with NoNodeError for good.
                # A fresh one can still lose that race between its
                # ensure_path and its create: try again.
                lock = recipes[cmd](path, extra_lock_patterns=patterns)
                try:
                    if ms == 0:
                        got = lock.acquire(blocking=False)
                    elif ms < 0:
                        got = lock.acquire()
                    else:
                        got = lock.acquire(timeout=ms / 1000.0)
                    break
                except LockTimeout:
                    got = False
                    break
                except NoNodeError:
                    if attempt == 4:
                        raise
                    log.warning("%s: parent of %s vanished, again", self.tag, path)
            if not got:
                return "timeout"
            self.lock = lock
            return "ok"
        if cmd == "counter-get":
            return "ok %d" % self.zk.Counter(words[1], support_curator=True).value
        if cmd == "counter-add":
            counter = self.zk.Counter(words[1], support_curator=True)
            counter += int(words[2])
            return "ok %d %d" % (counter.pre_value, counter.post_value)
        if cmd == "lock-release":
            if self.lock is None:
                return "error nothing held"
            lock, self.lock = self.lock, None
            lock.release()
            return "ok"
        return "error unknown command " + cmd


def main():
    zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=60)
    answer("ready")
    holders = {}
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if len(words) < 2:
            answer(words[0] + " error no command")
            continue
        holder = holders.get(words[0])
        if holder is None:
            holder = holders[words[0]] = Holder(zk, words[0])
        holder.commands.put(words[1:])
    # whatever is still held goes with the session
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
