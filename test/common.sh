# shellcheck shell=bash
#
# test/common.sh - shell functions shared by test/run-tests and test/demo.
# Sourced, not run.  The caller sets PROG (its name, for messages) and runs
# with `set -euo pipefail`.
#
# Both scripts work in two stages:
#   1. as the invoking user: install missing packages (test/deps), build
#      and install zklock (install through sudo when needed);
#   2. as an unprivileged user: everything that runs PostgreSQL servers,
#      which refuse to run as root.  When invoked as root, stage 1 copies the
#      source tree into a fresh directory owned by `postgres` and runs the
#      script again from there as `postgres` (see run_stage2_as_postgres).

TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_DIR=$(dirname "$TEST_DIR")
ZK=$TEST_DIR/zk

# The PostgreSQL installation to build against and test with: the one of
# $PG_CONFIG, otherwise the distribution's (test/deps --pg-version: 15 on
# Debian 12, 17 on Debian 13), which test/deps installs when missing.
if [[ -z ${PG_CONFIG:-} ]]; then
	if pg_major=$("$TEST_DIR/deps" --pg-version 2> /dev/null); then
		PG_CONFIG=/usr/lib/postgresql/$pg_major/bin/pg_config
	else
		PG_CONFIG=$(command -v pg_config || echo pg_config)
	fi
	unset pg_major
fi
export PG_CONFIG

# The unprivileged account stage 2 runs as when started by root.
PG_OS_USER=${ZKLOCK_TEST_USER:-postgres}

say() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die()
{
	warn "$*"
	exit 1
}

pg_bindir() { "$PG_CONFIG" --bindir; }

# True when this process runs stage 2 (re-executed by stage 1 as postgres).
in_stage2() { [[ ${ZKLOCK_STAGE2:-} == 1 ]]; }

# Build zklock in $1 and install it into the PostgreSQL of $PG_CONFIG; as
# root directly, otherwise with sudo unless the installation directories are
# writable.  With $2 = quiet, show make's output only when it fails.
build_and_install()
{
	local src=$1 quiet=${2:-} log
	local -a sudo=() make=(make -C "$src" PG_CONFIG="$PG_CONFIG")
	if ((EUID != 0)) && ! [[ -w $("$PG_CONFIG" --pkglibdir) && -w $("$PG_CONFIG" --sharedir)/extension ]]; then
		command -v sudo > /dev/null ||
			die "cannot install into $("$PG_CONFIG" --pkglibdir): run as root, install sudo, or use --no-build to use what is installed"
		sudo=(sudo)
	fi
	if [[ $quiet == quiet ]]; then
		log=$(mktemp)
		if ! { "${make[@]}" -j"$(nproc)" && "${sudo[@]}" "${make[@]}" install; } > "$log" 2>&1; then
			cat "$log" >&2
			rm -f "$log"
			die "building or installing zklock failed"
		fi
		rm -f "$log"
	else
		"${make[@]}" -j"$(nproc)" || die "building zklock failed"
		"${sudo[@]}" "${make[@]}" install || die "installing zklock failed"
	fi
}

# Build zklock in $1 and install it below directory $2 (make install
# DESTDIR=$2): a private installation the test servers load through the
# settings install_conf prints.  Needs no privileges.
build_private()
{
	local src=$1 dest=$2
	local -a make=(make -C "$src" PG_CONFIG="$PG_CONFIG")
	"${make[@]}" -j"$(nproc)" && "${make[@]}" install DESTDIR="$dest"
}

# postgresql.conf lines that make a server load zklock from the private
# installation below $1 (see build_private): the library through
# dynamic_library_path, the control and SQL files (and $libdir in
# module_pathname) through Debian's extension_destdir (Debian's 15 to 17)
# or upstream's extension_control_path (18 on), whichever the server knows.
install_conf()
{
	local dest=$1
	echo "dynamic_library_path = '$dest$("$PG_CONFIG" --pkglibdir):\$libdir'"
	# (grep reads it all: an early exit would fail the pipe under pipefail)
	if "$(pg_bindir)/postgres" --describe-config | cut -f 1 | grep -x extension_destdir > /dev/null; then
		echo "extension_destdir = '$dest'"
	else
		echo "extension_control_path = '$dest$("$PG_CONFIG" --sharedir):\$system'"
	fi
}

# Copy the source tree $1 to $2 (created): the files git knows (tracked and
# untracked but not ignored) or, outside git, everything but build outputs.
copy_tree()
{
	local src=$1 dest=$2
	mkdir -p "$dest"
	if git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
		(
			cd "$src" || exit
			git ls-files -z --cached --others --exclude-standard |
				while IFS= read -r -d '' f; do
					[[ -e $f ]] && printf '%s\0' "$f"
				done |
				tar --null -T - -cf -
		) | tar -C "$dest" -xf -
	else
		tar -C "$src" --exclude=.git --exclude=tmp_check --exclude=results \
			--exclude=log --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
			--exclude=regression.diffs --exclude=regression.out -cf - . |
			tar -C "$dest" -xf -
	fi
}

# Stage 1 as root: copy the tree to $WORK/src, hand $WORK to $PG_OS_USER and
# run test/$1 from the copy as that user with the remaining arguments; stage
# 2 works in $WORK/run.  Returns that run's exit status.  The caller's EXIT
# trap should call stop_stage2 and cleanup_workdir "$WORK".
STAGE2_PID=
run_stage2_as_postgres()
{
	local script=$1 rc=0
	shift
	id "$PG_OS_USER" > /dev/null 2>&1 ||
		die "no user '$PG_OS_USER' to run PostgreSQL as (initdb refuses root); is postgresql-$("$TEST_DIR/deps" --pg-version 2> /dev/null || echo NN) installed?"
	copy_tree "$SRC_DIR" "$WORK/src"
	chown -R "$PG_OS_USER:" "$WORK"
	chmod 700 "$WORK"
	# setpriv execs stage 2 in place, so that signals reach it directly;
	# runuser would SIGKILL it 2 s after passing on a SIGTERM.
	local -a as_user=(runuser -u "$PG_OS_USER" --)
	if command -v setpriv > /dev/null; then
		as_user=(setpriv --reuid="$PG_OS_USER" --regid="$(id -g "$PG_OS_USER")" --init-groups --)
	fi
	# From a directory that user can enter (root's may be closed to it).  In
	# the background, so that our signal traps run at once (see stop_stage2).
	(cd "$WORK" && exec "${as_user[@]}" env \
		HOME="$(getent passwd "$PG_OS_USER" | cut -d: -f6)" \
		USER="$PG_OS_USER" LOGNAME="$PG_OS_USER" \
		ZKLOCK_STAGE2=1 ZKLOCK_WORKDIR="$WORK/run" TMPDIR="$WORK" \
		PG_CONFIG="$PG_CONFIG" \
		bash "$WORK/src/test/$script" "$@") &
	STAGE2_PID=$!
	wait "$STAGE2_PID" || rc=$?
	STAGE2_PID=
	return "$rc"
}

# When stage 1 is interrupted: SIGTERM to stage 2 (whose traps clean up),
# and wait for it.
stop_stage2()
{
	[[ -n $STAGE2_PID ]] || return 0
	kill -TERM "$STAGE2_PID" 2> /dev/null || true
	wait "$STAGE2_PID" 2> /dev/null || true
	STAGE2_PID=
}

# Run a command in the background in its own session (so that it and all
# its children can be signalled together, see stop_job), its output going
# to file $1 and, through tail, to our standard output; wait for it and
# return its exit status.
JOB_PID=
run_job()
{
	local log=$1 rc=0 tailer
	shift
	: > "$log"
	setsid "$@" < /dev/null > "$log" 2>&1 &
	JOB_PID=$!
	tail -n +1 -f --pid="$JOB_PID" "$log" &
	tailer=$!
	wait "$JOB_PID" || rc=$?
	wait "$tailer" || true
	JOB_PID=
	return "$rc"
}

# Terminate the process group of a run_job still running (TERM, then KILL
# after 10 s).
stop_job()
{
	local deadline=$((SECONDS + 10))
	[[ -n $JOB_PID ]] || return 0
	kill -TERM -- "-$JOB_PID" 2> /dev/null || true
	while kill -0 -- "-$JOB_PID" 2> /dev/null; do
		if ((SECONDS >= deadline)); then
			kill -KILL -- "-$JOB_PID" 2> /dev/null || true
			break
		fi
		sleep 0.1
	done
	JOB_PID=
}

# Stop whatever a (possibly interrupted) run left below directory $1:
# ZooKeeper harnesses (test/zk state directories) and PostgreSQL servers.
stop_leftovers()
{
	local dir=$1 f
	local -a as_user=()
	[[ -d $dir ]] || return 0
	((EUID != 0)) || as_user=(runuser -u "$PG_OS_USER" --)
	while IFS= read -r -d '' f; do
		"$ZK" stop "$(dirname "$f")" > /dev/null 2>&1 || true
	done < <(find "$dir" -path '*/zk*/nodes' -type f -print0 2>/dev/null)
	while IFS= read -r -d '' f; do
		"${as_user[@]}" "$(pg_bindir)/pg_ctl" -D "$(dirname "$f")" -m immediate -w stop > /dev/null 2>&1 || true
	done < <(find "$dir" -name postmaster.pid -type f -print0 2>/dev/null)
}

# Stop leftovers below $1 and remove it.  With $2 = keep, stop the
# leftovers but keep the files; with $2 = leave, touch nothing.
cleanup_workdir()
{
	local dir=$1 mode=${2:-}
	[[ -n $dir && -d $dir && $mode != leave ]] || return 0
	stop_leftovers "$dir"
	[[ $mode == keep ]] || rm -rf "$dir"
}

# Print a TCP port nobody uses on this machine, from the range PostgreSQL's
# own TAP tests use (10200-32767), avoiding the ports given as arguments.
free_port()
{
	local port used
	used=" $(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); printf "%s ", a[n] }') $* "
	while true; do
		port=$((10200 + RANDOM % (32767 - 10200)))
		[[ $used == *" $port "* ]] || break
	done
	echo "$port"
}
