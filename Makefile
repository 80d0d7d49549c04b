# ovstream: see README.md.
GO      ?= go
BIN     := bin/ovstream
PKGS    := $(shell $(GO) list ./... | grep -v /integration)  # every package but the integration tests

.PHONY: build run test test-long unit integration fuzz vet lint clean check-unit check-docker screenshots realkafka

# .ci/postgres.sh may start a private PostgreSQL cluster and write its
# DATABASE_URL into .ci/local.env; every command that needs the database reads
# it first (a DATABASE_URL already in the environment wins).
PGENV := [ ! -f .ci/local.env ] || . ./.ci/local.env;

build:
	$(GO) build -o $(BIN) ./cmd/ovstream

# The demo: embedded broker, bundled real sample, run --drain, summary.
run: build
	@bash .ci/postgres.sh
	@$(PGENV) ./$(BIN) demo

# Unit tests, integration tests (real PostgreSQL, embedded broker over TCP), the real-broker
# tier (TestRealKafka*: Apache Kafka from Maven Central, docs/getting-started.md "Tested against Apache Kafka";
# its own step and timeout, ~3 min on 2 cores; fails without java/javac/mvn; the Flink SQL peer's test is in test-long), a COPY whose
# connection breaks mid-way and the outcome of a lost COMMIT, under the race detector (store), short fuzzing,
# the systemd unit (systemd-analyze) and the Dockerfile (BuildKit's parser and lint rules).
test: vet lint build
	@bash .ci/postgres.sh
	$(GO) test -count=1 $(PKGS)
	$(PGENV) $(GO) test -p 1 -count=1 -tags integration -timeout 25m -skip '^TestRealKafka|$(LONG_TESTS)' ./integration/...
	$(PGENV) $(GO) test -count=1 -tags integration -timeout 10m -run '$(STORE_TESTS)' -skip '$(LONG_TESTS)' ./store/
	$(PGENV) $(GO) test -count=1 -tags integration -timeout 15m -run '^TestRealKafka' -skip '$(LONG_TESTS)' ./integration/realkafka/
	$(PGENV) $(GO) test -count=1 -race -tags integration -run '^(TestCopyConnectionBroken|TestOutcomeFromCommitSeq)$$' ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 5s ./aggregate/
	$(GO) test -run '^$$' -fuzz '^FuzzMerge$$' -fuzztime 5s ./aggregate/
	$(GO) test -run '^$$' -fuzz '^FuzzPartialWindowData$$' -fuzztime 5s ./aggregate/
	$(GO) test -run '^$$' -fuzz '^FuzzLedger$$' -fuzztime 5s ./consumer/
	bash .ci/check-unit.sh $(BIN)
	cd .ci/dockerlint && $(GO) run . ../../Dockerfile

# The integration tests are folders of integration/ by the question they answer (docs/development.md
# "Tests"), each a package with the build tag integration, sharing integration/harness; they run one
# package at a time (-p 1): within a package the tests marked parallel already run two at once, and
# two packages side by side would put four ovstream processes, private clusters or browsers on two
# cores under tests whose waits are bounded. The real-broker tests are integration/realkafka's.
# store/ keeps its own PostgreSQL tests (STORE_TESTS; its unit tests run with PKGS, and the two
# connection-breaking ones under the race detector).
STORE_TESTS := ^Test(Store|Migrate)

# The long tier: the crash-injection tests (SIGKILL, SIGSTOP and crash points at every step of the
# commit, PostgreSQL and broker restarts, lost COMMIT answers, failovers of a replicated
# PostgreSQL, the three-node Kafka cluster's leader kill, unclean election, leader changes
# during a quiet live feed (0 late) and a seeded schedule
# of leader kills, JVM pauses and quorum loss under a live feed), a reader
# recovering from a flaky network and a rejection of 100,000 rows; each
# compared with an uninterrupted run and the SQL oracle; and the slowest of
# the tests that have a sibling of their kind in make test (standbys,
# restores, split merges, the Flink peer, secrets in output, the demo twice,
# pipelines sharing a database, a burst of keys, split provisional rows),
# so that make test stays under 15 minutes on 2 cores. make test keeps one
# of each kind (TestKillMidStreamThenRestart, TestFailoverAsync, TestCrashPointsKnown); CI
# (.ci/run) runs this tier after make test. (make crash is the much longer release schedule.)
LONG_TESTS := ^(TestCrash(Points|RandomKills|PostgresRestarts|Sigstop|BrokerRestart|DuringRejectionRounds)|TestFailover(Sync|RewindBack|DuringTakeover|SplitMerge|SplitDrainEndLost)|TestSplitCrash(Restart|RandomKills)|TestSplitAmbiguous(CommitDuringMerge|DrainEnd)|TestAmbiguousCommit|TestSplitPostgresRestart|TestFlakyKafkaRecovers|TestRejectHundredThousandRows|TestRealKafka(ClusterLeaderKilledDuringRun|UncleanElectionTruncation|LeaderChangeNoLateRecords|LeaderChangesLong|FlinkPeerEqualsDrainAndOracle|FlinkPeerXAEqualsDrainAndOracle)|TestStandby(FrozenOwner|Supervisor)|TestRestoreBeforeFirstClaimClaimsAgainAndReplays|TestSplit(IdlePartitionDoesNotHoldTheMerge|SeedWaitsForUncommittedPartitions)|TestOpsDatabasePasswordNeverShown|TestDemoTwiceWritesTheSameTable|TestPipelinesShareADatabase|TestBurstOfKeysEqualsSQLOracle|TestSplitProvisionalRowsEqualOracle)$$
test-long: build
	@bash .ci/postgres.sh
	$(PGENV) $(GO) test -p 1 -count=1 -tags integration -timeout 30m -run '$(LONG_TESTS)' ./integration/...

# The real-broker tier alone (Apache Kafka 4.3.1 on 127.0.0.1; the jars are copied once into
# ~/.cache/ovstream/kafka-<version>).
realkafka:
	@bash .ci/postgres.sh
	$(PGENV) $(GO) test -count=1 -tags integration -timeout 10m -run '^TestRealKafka' ./integration/realkafka/

# A PNG of each dashboard page (docs/dashboard.md "Dashboard") in screenshots/ (not committed), taken by
# the browser tests (headless Chromium, Debian's chromium) on the Auckland and Halifax samples.
screenshots:
	@bash .ci/postgres.sh
	$(PGENV) $(GO) test -count=1 -tags integration -timeout 10m -run '^TestDashboard(|OnTimeAndHeadwayPages|AccuracyPage)$$' ./integration/dashboard/ \
	  -args -dashboard.screenshots $(CURDIR)/screenshots
	@ls -1 screenshots/*.png

# deploy/systemd/ovstream.service: systemd-analyze verify and security.
check-unit: build
	bash .ci/check-unit.sh $(BIN)

# The Dockerfile without a container engine: BuildKit's parser and lint rules
# (the module comes through the Go module proxy), plus the image's promises.
# With a Docker daemon and registry access: docker build -t ovstream .
check-docker:
	cd .ci/dockerlint && $(GO) run . ../../Dockerfile

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration,crashpoints ./...

# golangci-lint (.golangci.yml), pinned: installed from the Go module proxy into
# ~/.cache/ovstream on first use (a few minutes of compiling, once). The config lints
# with the integration and crashpoints tags; the second run covers the crash points'
# no-op build, which those tags leave out.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT_DIR     := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ovstream/golangci-lint-$(GOLANGCI_LINT_VERSION)
GOLANGCI_LINT         := $(GOLANGCI_LINT_DIR)/golangci-lint

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run --build-tags integration ./consumer/crashpoint/...

$(GOLANGCI_LINT):
	GOBIN=$(GOLANGCI_LINT_DIR) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 2m ./aggregate/
	$(GO) test -run '^$$' -fuzz '^FuzzMerge$$' -fuzztime 2m ./aggregate/
	$(GO) test -run '^$$' -fuzz '^FuzzPartialWindowData$$' -fuzztime 2m ./aggregate/
	$(GO) test -run '^$$' -fuzz '^FuzzLedger$$' -fuzztime 2m ./consumer/

# The long crash schedule for release checks, not CI: at least 200 SIGKILLs at seeded random
# moments (OVSTREAM_CRASH_SEED replays a seed) while the whole Auckland 48 h archive is produced,
# then a final drain compared with an uninterrupted run and the SQL oracle. CRASH_ARCHIVE is the
# archive (shared/data); CRASH_KILLS raises the number of kills.
CRASH_ARCHIVE ?= ../shared/data/auckland-20160519-48h-tripupdates-pb.tar.xz
CRASH_KILLS   ?= 200
.PHONY: crash
crash:
	@bash .ci/postgres.sh
	@$(PGENV) test -f "$(CRASH_ARCHIVE)" || { echo "crash: no archive at $(CRASH_ARCHIVE); set CRASH_ARCHIVE" >&2; exit 1; }
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	  tar -xJf "$(CRASH_ARCHIVE)" -C "$$dir" && $(PGENV) \
	  $(GO) test -count=1 -tags integration -timeout 2h -v -run '^TestCrashRandomKills$$' ./integration/crash/ \
	    -args -crash.long -crash.data "$$dir" -crash.kills $(CRASH_KILLS)

clean:
	rm -rf bin

# Performance (BENCHMARKS.md): ovstream broker as its own process, 5M predictions
# of the Auckland 48 h archive plus positions, then T_read, T_ovstream (run --drain), T_write,
# T_split (two split drains) and T_elt (the ELT peer) in each of --trials trials (3), each phase
# on a quiet machine (--max-load 1.5); ends with the medians ratio=, limit_ratio=, elt_ratio=,
# split_ratio=; then the live phase: a producer at 10,000 and 50,000 msgs/s, event
# times on the wall clock, while `ovstream run` runs as a service, one closable window each (about
# 3 minutes per rate), freshness_p99= per rate. BENCHFLAGS e.g. "--predictions 500000 --trials 1",
# "--scale 1,4,16", "--split=false", "--elt=false", "--live=false", "--live-windows 3";
# "--broker kafka": Apache Kafka (integration/realkafka, one KRaft node, 1 GiB heap; needs java
# and mvn) instead of the embedded kfake broker, "--broker both": each, side by side;
# "--sustained" (--sustained-duration 2m): the highest sustained rate, sustained_rate=.
# "--peer flink" (with --broker kafka or both; needs a JDK and mvn): also the Flink SQL job
# (integration/flinkpeer), its rows checked against (b)'s, flink_wall_ratio=, flink_cpu_ratio=,
# flink_rss_ratio=.
.PHONY: bench
bench:
	@bash .ci/postgres.sh
	$(PGENV) $(GO) run ./integration/bench $(BENCHFLAGS)

# deploy/prometheus/alerts.yml with promtool (Debian package prometheus): the
# rules parse and their unit tests pass. make test runs the same checks.
.PHONY: check-alerts
check-alerts:
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml
