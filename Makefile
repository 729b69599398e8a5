# zklock: PGXS build.
#
#   make && make install          build and install into the PostgreSQL
#                                 found by pg_config
#   make installcheck             pg_regress suites (sql/, expected/) on a
#                                 temporary instance, then the TAP suites in
#                                 test/t; both need a running ZooKeeper, see
#                                 test/run-tests, which sets everything up.
#   make dist                     zklock-X.Y.Z.zip for PGXN: the committed
#                                 tree (HEAD) with the version of META.json
#   make deb                      Debian packages postgresql-NN-zklock for
#                                 every PostgreSQL installed here, in deb/
#                                 (dpkg-buildpackage on a copy of the tree)

MODULE_big = zklock
OBJS = \
	src/zklock.o \
	src/shared/settings.o \
	src/shared/kinds.o \
	src/shared/wait_events.o \
	src/shared/protocol.o \
	src/shared/naming.o \
	src/shared/paths.o \
	src/shared/nodename.o \
	src/backend/args.o \
	src/backend/lock.o \
	src/backend/barrier.o \
	src/backend/shared_count.o \
	src/backend/double_barrier.o \
	src/backend/leader.o \
	src/backend/claim.o \
	src/backend/monitor.o \
	src/backend/holdings.o \
	src/backend/acquire.o \
	src/backend/request.o \
	src/backend/wait.o \
	src/worker/worker.o \
	src/worker/reply.o \
	src/worker/session.o \
	src/worker/credentials.o \
	src/worker/client_log.o \
	src/worker/engine/engine.o \
	src/worker/engine/part.o \
	src/worker/engine/part_calls.o \
	src/worker/engine/calls.o \
	src/worker/engine/watches.o \
	src/worker/engine/sequential.o \
	src/worker/engine/handoff.o \
	src/worker/engine/parents.o \
	src/worker/engine/instance.o \
	src/worker/recipes/lock.o \
	src/worker/recipes/semaphore.o \
	src/worker/recipes/barrier.o \
	src/worker/recipes/shared_count.o \
	src/worker/recipes/double_barrier.o \
	src/worker/recipes/leader.o \
	src/worker/recipes/claim.o \
	src/worker/recipes/claim_settle.o \
	src/worker/recipes/revoke.o \
	src/worker/recipes/inspect.o

EXTENSION = zklock
# Every install script (sql/zklock--V.sql) and upgrade script
# (sql/zklock--OLD--NEW.sql); zklock.control names the default version.
# 1.3 to 1.6 have no install script of their own: CREATE EXTENSION
# installs 1.2 and updates it (see sql/zklock--1.2--1.3.sql).
DATA = \
	sql/zklock--1.0.sql \
	sql/zklock--1.1.sql \
	sql/zklock--1.2.sql \
	sql/zklock--1.0--1.1.sql \
	sql/zklock--1.1--1.2.sql \
	sql/zklock--1.2--1.3.sql \
	sql/zklock--1.3--1.4.sql \
	sql/zklock--1.4--1.5.sql \
	sql/zklock--1.5--1.6.sql
# For the tests of code that calls zklock (docs/testing.md): the throwaway
# ZooKeeper, into pg_config --bindir, and the PGXS fragment that runs
# pg_regress with it, into pg_config --sharedir/extension.
SCRIPTS = testing/zklock-test-zookeeper
DATA += testing/zklock_regress.mk
PGFILEDESC = "zklock - distributed locks held in Apache ZooKeeper"

# The version of the build (zk_version(), the worker's start line): the
# "version" of META.json, X.Y.Z for zklock.control's default_version X.Y
# (test/t/006_versions.pl checks that they and debian/changelog agree).
# Recursive: srcdir is known only once PGXS is included.
ZKLOCK_VERSION = $(shell sed -n 's/^   "version": "\(.*\)",$$/\1/p' $(srcdir)/META.json)

# project headers are named by their directory: "shared/protocol.h"
PG_CPPFLAGS = -I$(srcdir)/src -DZKLOCK_VERSION='"$(ZKLOCK_VERSION)"'
SHLIB_LINK = -lzookeeper_st

# pg_regress runs on its own temporary instance; test/run-tests writes the
# configuration (shared_preload_libraries, zklock.hosts of the test
# ZooKeeper) to $(ZKLOCK_REGRESS_CONF).  The test database is UTF8 whatever
# locale the temporary instance gets (names.sql tests non-ASCII names).
ZKLOCK_REGRESS_CONF ?= $(CURDIR)/tmp_check/regress.conf
REGRESS = setup names acquire xact rwlock semaphore multilock monitor leader jobclaim barrier dbarrier sharedcount revoke scope upgrade
REGRESS_OPTS = --encoding=UTF8 --temp-config=$(ZKLOCK_REGRESS_CONF) \
	--temp-instance=$(CURDIR)/tmp_regress

TAP_TESTS = 1
PROVE_TESTS = $(or $(ZKLOCK_TAP_TESTS),test/t/*.pl)
# Two test files at a time (ZKLOCK_TAP_JOBS): most of a file's time is
# spent waiting (session timeouts, pg_cron's minute, Patroni's loop), and
# each has its own ZooKeeper, instances and ports.
ZKLOCK_TAP_JOBS ?= 2
override PROVE_FLAGS += --timer -j$(ZKLOCK_TAP_JOBS) -I $(srcdir)/test/perl

EXTRA_CLEAN = tmp_regress tmp_check results regression.diffs regression.out log

# Debian's PGXS would also build LLVM bitcode; zklock has nothing to JIT.
override with_llvm = no

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

ifeq ($(ZKLOCK_VERSION),)
$(error no "version" found in $(srcdir)/META.json)
endif

# every object depends on the project's headers, and on the version
$(OBJS): $(wildcard $(srcdir)/src/*.h $(srcdir)/src/*/*.h $(srcdir)/src/*/*/*.h) $(srcdir)/META.json

# Out-of-tree (VPATH) builds, as pg_buildext's build-NN/ directories: the
# object directories below src/ are made in the build directory (absolute
# names, which VPATH does not look up in the source tree).
OBJ_DIRS = $(patsubst %/,%,$(addprefix $(CURDIR)/,$(sort $(dir $(OBJS)))))
$(OBJS): | $(OBJ_DIRS)
$(OBJ_DIRS):
	$(MKDIR_P) $@

# The benchmark (bench/run; not part of the tests): its own ZooKeeper
# (fsync on) and PostgreSQL instances, pgbench beside Apache Curator and the
# one-session limit; then the distinct-lock rows against a 3-node ensemble.
# See docs/benchmark.md.
.PHONY: bench bench-smoke
bench:
	bench/run
	bench/run --ensemble distinct

bench-smoke:
	bench/run --smoke

# PGXN distribution: git archive of HEAD (uncommitted changes are not in it),
# named after the top-level "version" of META.json, which must be the
# default_version of zklock.control (1.3 -> 1.3.0).
DIST_VERSION = $(ZKLOCK_VERSION)
DIST_ZIP = $(EXTENSION)-$(DIST_VERSION).zip

.PHONY: dist
dist:
	@ctl=$$(sed -n "s/^default_version = '\(.*\)'$$/\1/p" $(srcdir)/$(EXTENSION).control); \
	case "$(DIST_VERSION)" in \
		"$$ctl".*) ;; \
		*) echo "META.json version '$(DIST_VERSION)' is not default_version '$$ctl' of $(EXTENSION).control" >&2; exit 1 ;; \
	esac
	git -C $(srcdir) archive --format=zip --prefix=$(EXTENSION)-$(DIST_VERSION)/ -o $(CURDIR)/$(DIST_ZIP) HEAD
	@echo "wrote $(DIST_ZIP)"

# Debian packages (debian/, pg_buildext): dpkg-buildpackage -b in a copy of
# the tree (in a git checkout the files git knows, committed or not; in a
# release tree from make dist every file but deb/ and build products) in
# deb/src, so that the packages land in deb/.  debian/control is made anew from
# debian/control.in for the PostgreSQL versions installed here.
.PHONY: deb
deb:
	rm -rf $(CURDIR)/deb
	mkdir -p $(CURDIR)/deb/src
	cd $(srcdir) && if [ -e .git ]; then \
		git ls-files -z --cached --others --exclude-standard; \
	else \
		find . -path ./deb -prune -o \( -type f -o -type l \) \
			! -name '*.o' ! -name '*.so' ! -name '*.bc' -print0; \
	fi | tar --null --ignore-failed-read -T - -cf - | tar -C $(CURDIR)/deb/src -xf -
	cd $(CURDIR)/deb/src && PG_UPDATECONTROL=yes dpkg-buildpackage -us -uc -b
	@ls $(CURDIR)/deb/*.deb
