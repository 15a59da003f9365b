# crowdlog — the two commands: `make demo` and `make test`.
GO      ?= go
BIN     := bin/crowdlog
PKGS    := ./...

.PHONY: all build test test-short race vet attacks fuzz bench demo chaos clean chdb

all: build

build:
	$(GO) build -o $(BIN) ./cmd/crowdlog

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags chdb $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# libchdb.so, the current ClickHouse engine (chDB 26.7) the tests with build
# tag chdb load: fetched once by scripts/chdb-lib.sh (about 180 MB, cached in
# ~/.cache/crowdlog), which prints its path last.
CHDB_LIB = lib=$$(bash scripts/chdb-lib.sh | tail -1) && [ -s "$$lib" ] || \
	{ echo "make: scripts/chdb-lib.sh did not provide libchdb.so (see its message above)" >&2; exit 1; }

# The full suite: unit tests, fuzz seed corpora, and end-to-end runs through
# embedded NATS, kfake and a real ClickHouse server (installed by .ci/run or
# `make demo`; without it, tests that need it skip unless CI=true), with
# build tag chdb: every SQL statement and docs/sql.md recipe also runs on the
# current ClickHouse engine (chDB). The attack tests run first, in `make
# attacks`, and are skipped here.
test: vet attacks race
	@$(CHDB_LIB); set -x; CHDB_LIB_PATH="$$lib" GO=$(GO) bash scripts/gotest.sh -tags chdb -count=1 -timeout 35m -skip '^TestAttack' $(PKGS)

# Only the tests on the current ClickHouse engine (chDB, build tag chdb):
# the adapter, every statement of the release code, the docs/sql.md recipes
# (add -v through GOTESTFLAGS=-v for the statement counts per group).
chdb:
	@$(CHDB_LIB); set -x; CHDB_LIB_PATH="$$lib" $(GO) test -tags chdb -count=1 -timeout 20m $(GOTESTFLAGS) ./infra/clickhouse/chdb && \
	CHDB_LIB_PATH="$$lib" $(GO) test -tags chdb -count=1 -timeout 20m -run '(?i)chdb' $(GOTESTFLAGS) ./release/...

# The short suite of every package under the race detector (tests that
# replay the whole bundled log skip in -short; the full run above has them;
# the attacks run in `make attacks`).
race:
	GO=$(GO) bash scripts/gotest.sh -race -short -count=1 -timeout 30m -skip '^TestAttack' $(PKGS)

# The attack suite: every TestAttack* test mounts one attack of
# docs/threat-model.md against real state and prints
# `ATTACK <name>: <outcome with numbers>`; fails when an attack succeeds.
attacks:
	GO=$(GO) bash scripts/attacks.sh

test-short: vet
	$(GO) test -short -count=1 $(PKGS)

# Short fuzzing of every network decoder (FUZZTIME per target).
FUZZTIME ?= 20s
fuzz:
	@for spec in \
	  "./protocol/star FuzzParseReport" "./protocol/onion FuzzPeel" "./protocol/oprf FuzzParseRandomness" "./protocol/onion FuzzParseRelayKeys" \
	  "./protocol/star FuzzParsePayload" "./protocol FuzzParseDecrypted" "./protocol FuzzParseControl" "./aggregator FuzzApply" \
	  "./release/stage FuzzApply" "./ingest/aol FuzzReader" "./ingest/normalize FuzzQuery" \
	  "./protocol/blind FuzzParse" "./protocol/blind FuzzOpenBundle" "./aggregator/vectors FuzzApply" \
	  "./protocol FuzzParseVectorsControl" "./aggregator/vectors FuzzApplyControl" \
	  "./coordinator FuzzParse" "./release/pdd FuzzApply" "./relays FuzzClassify" "./relays FuzzValidForward" \
	  "./ingest/apps FuzzSplit" "./protocol/star FuzzOpenSealedPayload" "./aggregator FuzzApplyInnerReport" \
	  "./protocol/arc FuzzParsePresentation" "./protocol/arc FuzzParseCredentialRequest" "./protocol/arc FuzzParseCredentialResponse" \
	  "./protocol/arc FuzzParseCredential" "./protocol/arc FuzzParsePublicKey" "./protocol/arc FuzzParsePrivateKey" \
	  "./protocol/token FuzzParseToken" "./protocol/token FuzzParsePrivateKey" "./protocol/token FuzzIssue" \
	  "./protocol/token FuzzParseIssueRequest" "./protocol/token FuzzParseIssueResponse" "./protocol/token FuzzParseKeys" \
	  "./protocol/token FuzzParsePrio3Epoch" \
	  "./issuer FuzzParseCounter" \
	  "./aggregator FuzzPrepareReport" "./aggregator FuzzDecodeSpill" "./aggregator FuzzDecodeState" "./aggregator FuzzSnapshotHeader" \
	  "./release FuzzDecodeDraw" \
	  "./protocol/prio3 FuzzParseReport" "./protocol/prio3 FuzzParseAggregateReq" "./protocol/prio3 FuzzParseAggregateResp" \
	  "./protocol/prio3 FuzzParseCollectReq" "./protocol/prio3 FuzzParseAggShare" "./protocol/prio3 FuzzOpenReport" \
	  "./protocol/prio3 FuzzParseSignedReq" "./protocol/prio3 FuzzParseSignedSettings" \
	  "./protocol/pipelinespec FuzzParse" "./protocol/pipelinespec FuzzParseAnnouncement" "./protocol/pipelinespec FuzzParseRequest" \
	  "./protocol/pipelinespec FuzzParseSignedPipelines" \
	  "./protocol/pipelinespec FuzzParseSignedAnswer" \
	  "./aggregator/prio3 FuzzBatchLog" "./aggregator/prio3 FuzzLeaderFile" "./aggregator/prio3 FuzzHelperFile" \
	  "./aggregator/prio3 FuzzRestoreLeader" "./aggregator/prio3 FuzzRestoreHelper" "./release/prio3 FuzzApply" \
	  "./infra/kafka FuzzFrameGuard"; do \
	  set -- $$spec; echo "== $$1 $$2"; $(GO) test -run XXX -fuzz "^$$2$$" -fuzztime $(FUZZTIME) $$1 || exit 1; done

bench:
	$(GO) test -run XXX -bench . -benchtime 2s ./protocol/... ./aggregator ./relays

# Every stage's throughput per core next to its crypto bound, one run on
# this machine: prints `BOUND <stage> measured= bound= unit=
# ratio=`. BOUNDS_E2E=0 skips end-to-end (~2.5 min on 2 cores);
# BOUNDS_PENDING=10000000 for 10 million pending reports; see the script.
.PHONY: bench-bounds
bench-bounds:
	GO=$(GO) bash scripts/bench-bounds.sh

# Prio3 mode's scale curve: leader and helper as processes of their own on
# pre-sealed uploads of L = 10,000 keywords, per size uploads/s per core,
# peak RSS, disk bytes per upload, collection time, BOUND lines against
# bare circl. SIZES=1000,10000,100000 adds the 100k point (~79 GB of Kafka).
.PHONY: bench-prio3-scale
bench-prio3-scale:
	GO=$(GO) SIZES=$(SIZES) bash scripts/bench-prio3-scale.sh

demo:
	bash scripts/demo.sh

# The chaos test on the whole bundled log, on a 3-node NATS cluster and 3
# kfake brokers: random SIGKILLs of relays, aggregators and release,
# aggregator group 1 -> 3 -> 2, NATS nodes stopped and restarted; the export
# must equal the fault-free release.
chaos:
	CROWDLOG_CHAOS_USERS=1000 $(GO) test -count=1 -timeout 60m -run TestChaos -v ./tests

clean:
	rm -rf bin demo-state
