# zklock_regress.mk - "make installcheck" for code that calls zklock
# (installed with zklock; see its docs/testing.md)
#
# Include it after PGXS:
#
#   include $(shell $(PG_CONFIG) --sharedir)/extension/zklock_regress.mk
#
# installcheck then runs pg_regress on a temporary instance that preloads
# zklock (--temp-instance, --temp-config), under zklock-test-zookeeper run,
# which starts a throwaway ZooKeeper first and stops it afterwards, pass or
# fail (also when make is killed).  Options, set before or after the
# include, or on make's command line:
#
#   ZKLOCK_TEST_INSTANCES = 1     start that many more instances on the same
#                                 ZooKeeper; the SQL scripts find their ports
#                                 in ZKLOCK_TEST_PORT1, ... (\getenv)
#   ZKLOCK_TEST_SETTINGS = zklock.session_timeout=2000 ...
#                                 settings of every instance (NAME=VALUE)
#   ZKLOCK_TEST_ZOOKEEPER_OPTS = --tick 100
#                                 options of zklock-test-zookeeper start
#   ZKLOCK_TEST_EXISTING = yes    none of this: plain installcheck against
#                                 the server PGHOST and PGPORT name, which
#                                 must preload zklock itself
#
# The scripts can stop and start the ZooKeeper again (an outage):
#   \! "$ZKLOCK_TEST_ZOOKEEPER" down
#   \! "$ZKLOCK_TEST_ZOOKEEPER" up

ifeq ($(ZKLOCK_TEST_EXISTING),)
ZKLOCK_TEST_ZOOKEEPER = $(bindir)/zklock-test-zookeeper
ZKLOCK_TEST_DIR = $(CURDIR)/tmp_check/zklock
REGRESS_OPTS += --temp-instance=$(CURDIR)/tmp_check/instance \
	--temp-config=$(ZKLOCK_TEST_DIR)/zklock.conf
# PGXS's pg_regress command line, with pg_regress run under
# zklock-test-zookeeper run: re-read by eval, so its # are escaped and the
# $$ keep the options' variables for later
zklock_pg_regress = $(top_builddir)/src/test/regress/pg_regress
zklock_hash := \#
ifeq ($(findstring $(value zklock_pg_regress),$(value pg_regress_installcheck)),)
$(error zklock_regress.mk: no $(value zklock_pg_regress) in PGXS's pg_regress_installcheck)
endif
$(eval pg_regress_installcheck = $(subst $(zklock_hash),\$(zklock_hash),$(subst \
	$(value zklock_pg_regress),'$$(ZKLOCK_TEST_ZOOKEEPER)' run \
	--dir '$$(ZKLOCK_TEST_DIR)' --bindir '$$(bindir)' --instances $$(or $$(ZKLOCK_TEST_INSTANCES),0) \
	$$(addprefix --set ,$$(ZKLOCK_TEST_SETTINGS)) $$(ZKLOCK_TEST_ZOOKEEPER_OPTS) \
	-- $(value zklock_pg_regress),$(value pg_regress_installcheck))))
endif
