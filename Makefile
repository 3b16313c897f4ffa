# etcdbackup — build, test and lint.
#
#   make test    install the test servers, run every test (race detector on,
#                integration tests required: a skipped test fails the run)
#   make lint    gofmt check, go vet, staticcheck
#   make tools   install the pinned tools into .tools/bin (reused when present)
#   make generate  regenerate examples/kubernetes' deepcopy code, CRDs and RBAC
#   make stress  run the concurrent packages' tests many times beside CPU hogs

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

TOOLS := $(CURDIR)/.tools/bin
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
STATICCHECK_VERSION := v0.8.2
FAKE_GCS_VERSION := v1.56.1
# Azurite's version and its dependencies are pinned by the package.json and
# package-lock.json in internal/azuritetest.
AZURITE_DIR := $(CURDIR)/.tools/azurite
AZURITE := $(AZURITE_DIR)/node_modules/.bin/azurite-blob

# Tests find the servers here; they fail (never skip) without them.
export ETCDBACKUP_MINIO_BIN := $(TOOLS)/minio
export ETCDBACKUP_FAKE_GCS_BIN := $(TOOLS)/fake-gcs-server
export ETCDBACKUP_AZURITE_BIN := $(AZURITE)

# examples/kubernetes is a Go module of its own (the library's go.mod has
# no Kubernetes module). Its envtest integration tests run a real
# kube-apiserver and etcd, built from the Go module proxy by its tools
# module (examples/kubernetes/tools/go.mod pins k8s.io/kubernetes and its
# staging modules) into a directory named after the pinned versions, once.
KUBE_DIR := examples/kubernetes
KUBERNETES_VERSION := v1.37.2
KUBE_ETCD_VERSION := v3.7.0
CONTROLLER_GEN_VERSION := v0.23.0
KUBE_ASSETS := $(CURDIR)/.tools/kubebuilder/k8s-$(KUBERNETES_VERSION)-etcd-$(KUBE_ETCD_VERSION)
KUBE_TOOLS := $(KUBE_ASSETS)/kube-apiserver $(KUBE_ASSETS)/etcd $(TOOLS)/controller-gen
export KUBEBUILDER_ASSETS := $(KUBE_ASSETS)
export CONTROLLER_GEN := $(TOOLS)/controller-gen

GO_TEST_FLAGS ?= -race -count=1 -timeout 60m

.PHONY: all tools test lint fmt

all: lint test

SERVERS := $(TOOLS)/minio $(TOOLS)/fake-gcs-server $(AZURITE)

tools: $(SERVERS) $(TOOLS)/staticcheck $(KUBE_TOOLS)

$(TOOLS)/minio:
	@echo "installing minio $(MINIO_VERSION) into $(TOOLS) (a few minutes, once)"
	GOBIN=$(TOOLS) go install github.com/minio/minio@$(MINIO_VERSION)

$(TOOLS)/fake-gcs-server:
	@echo "installing fake-gcs-server $(FAKE_GCS_VERSION) into $(TOOLS) (a minute or two, once)"
	GOBIN=$(TOOLS) go install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION)

# Azurite runs on Node.js; Debian's packages stand in when the machine has
# no npm.
$(AZURITE): internal/azuritetest/package.json internal/azuritetest/package-lock.json
	@command -v npm >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
	mkdir -p $(AZURITE_DIR)
	cp internal/azuritetest/package.json internal/azuritetest/package-lock.json $(AZURITE_DIR)/
	cd $(AZURITE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

test: $(SERVERS) $(KUBE_TOOLS)
	go test $(GO_TEST_FLAGS) -json ./... | go run ./internal/testreport
	cd $(KUBE_DIR) && go test $(GO_TEST_FLAGS) -json ./... | (cd $(CURDIR) && go run ./internal/testreport)

lint: $(TOOLS)/staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(TOOLS)/staticcheck ./...
	go vet -tags benchlean ./internal/bench
	go vet -tags etcdbackup_faultpoints ./internal/faultpoint ./storage/blob ./backup
	cd $(KUBE_DIR) && go vet ./... && $(TOOLS)/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# The control plane of examples/kubernetes' envtest: the versions in the
# directory name must be those its tools module pins.
$(KUBE_ASSETS)/kube-apiserver: | $(KUBE_DIR)/tools/go.mod
	@grep -qE 'k8s.io/kubernetes $(KUBERNETES_VERSION)( |$$)' $(KUBE_DIR)/tools/go.mod || \
		{ echo "$(KUBE_DIR)/tools/go.mod does not pin k8s.io/kubernetes $(KUBERNETES_VERSION)"; exit 1; }
	@echo "building kube-apiserver $(KUBERNETES_VERSION) into $(KUBE_ASSETS) (several minutes, once)"
	cd $(KUBE_DIR)/tools && go build -trimpath -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(KUBE_ASSETS)/etcd: | $(KUBE_DIR)/tools/go.mod
	@grep -qE 'go.etcd.io/etcd/server/v3 $(KUBE_ETCD_VERSION)( |$$)' $(KUBE_DIR)/tools/go.mod || \
		{ echo "$(KUBE_DIR)/tools/go.mod does not pin go.etcd.io/etcd/server/v3 $(KUBE_ETCD_VERSION)"; exit 1; }
	cd $(KUBE_DIR)/tools && go build -trimpath -o $@ go.etcd.io/etcd/server/v3

$(TOOLS)/controller-gen:
	GOBIN=$(TOOLS) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

# generate: examples/kubernetes' deepcopy code, CRDs and RBAC, from its
# Go types and markers; TestGeneratedManifestsAreCurrent checks them.
.PHONY: generate
generate: $(TOOLS)/controller-gen
	cd $(KUBE_DIR) && $(CONTROLLER_GEN) object paths=./api/... \
		crd paths=./api/... output:crd:dir=config/crd \
		rbac:roleName=etcdbackup-controller paths=./controller/... output:rbac:dir=config/rbac

# fuzz: run every fuzz target for FUZZTIME each: CI runs a count of
# executions (a duration can end while the fuzzer minimizes a new input,
# which go test reports as "context deadline exceeded"); a real session is
# FUZZTIME=5m. New crashers land in testdata/fuzz. A target may name its
# own count after a second colon, used with the default FUZZTIME: the
# snapshot-keys target opens an etcd store per input (about 20 a second).
FUZZTIME ?= 20000x
FUZZ_TARGETS := \
	./backup:FuzzTrailer \
	./backup:FuzzValidateName \
	./backup:FuzzParseManifest \
	./backup:FuzzParseKeyLine \
	./backup:FuzzRangeChunk \
	./backup:FuzzKeysJSONReader \
	./backup:FuzzKeysZipReader \
	./restore:FuzzSnapshotKeys:1000x \
	./restore:FuzzCheckKeyValue \
	./destination:FuzzParseURL

# release: the CLI as shipped: stripped, without file paths, and without
# the Google Cloud Storage client's DirectPath (xDS) support
# (disable_grpc_modules), which only its gRPC API uses: gs://
# destinations speak the JSON API. make bench
# builds the CLI modes' binary with the same command.
RELEASE_BUILD = go build -trimpath -tags disable_grpc_modules -ldflags='-s -w'
.PHONY: release
release:
	$(RELEASE_BUILD) -o bin/etcdbackup ./examples/etcdbackup

# rules: check the Prometheus alerting rules of examples/alerts with
# promtool (Debian's prometheus package), run their unit tests, and lint
# the names of every series the library's collectors export.
.PHONY: rules
rules:
	@command -v promtool >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	promtool check rules examples/alerts/etcdbackup.rules.yaml
	promtool test rules examples/alerts/etcdbackup.rules.test.yaml
	@mkdir -p bench-out
	ETCDBACKUP_EXPOSITION=$(CURDIR)/bench-out/exposition.txt go test -count=1 -run '^TestExposition$$' ./examples/alerts
	promtool check metrics < bench-out/exposition.txt

# stress: the packages whose tests use goroutines and clocks, with -race
# and -count=N, beside two busy loops that leave at most one core free;
# a summary per package names each failing test and how often it failed
# (internal/stress/stress.sh). Run it before submitting a change to
# concurrent code. STRESS_PACKAGES picks package:rounds pairs,
# STRESS_ROUNDS overrides every package's rounds, STRESS_HOGS the busy
# loops, STRESS_RUN and STRESS_SKIP a -run and a -skip pattern. The
# default rounds take about two and a half hours on two cores (schedule's
# 20 rounds 8 minutes on an otherwise idle machine, 23 on a loaded one;
# backup's 5 about 45 minutes; the figures per package are in README), e.g.
#   make stress STRESS_PACKAGES=./schedule:20 STRESS_RUN=TestFires
STRESS_PACKAGES ?= ./schedule:20 ./backup:5 ./destination:5 ./replicate:5 ./restore:5 ./examples/kubernetes/controller:3
.PHONY: stress
stress: $(SERVERS) $(KUBE_TOOLS)
	STRESS_PACKAGES='$(STRESS_PACKAGES)' internal/stress/stress.sh

.PHONY: fuzz
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; time=$(FUZZTIME); \
		case $$rest in *:*) [ "$(FUZZTIME)" = 20000x ] && time=$${rest#*:};; esac; \
		echo "fuzz $$pkg $$name for $$time"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$time -fuzzminimizetime 5s $$pkg || exit 1; \
	done

# bench: measure backups of a Kubernetes-like etcd (256 MiB, 1 GiB, 2 GiB)
# to MinIO: the two-step approach of cron-job tools against etcdbackup's
# streaming, zstd, age and spool modes, the CLI as shipped (built as make
# release builds it, into a temporary directory), logical exports and
# imports, and restores of a backup against download-then-`etcdutl
# snapshot restore`; on the 1 GiB etcd only (-remote-sizes), the same jobs
# (the CLI at its defaults and with --memory=0, restores) against MinIO as
# a remote store, over TLS at no added and 100 ms RTT, each against
# two-step through the same store (internal/bench/store.go); copies of a
# backup between two MinIO servers (`etcdbackup copy` against a minio-go
# Get→Put, what `mc cp` does); then continuous
# backup (pitr), its commit lag against the remote stores (pitr-remote),
# a point restore after many writes (pitr-restore) and
# replication of a follower's chain to a second MinIO server (replicate:
# lag p99 and the replicator's RSS), and seed scale (seed: one scheduler
# running 1,000 continuous jobs over 10 etcd processes, most of its time
# the jobs' start-up), and a follower's recovery after an outage
# (recovery).
# Every step saves its figures in bench-out/results.json and renders the
# whole of BENCHMARKS.md with BENCHMARKS.png from it: nothing in the report
# is typed in. Filled etcds are cached in bench-out/etcd (git-ignored).
# Time on a quiet 2-core machine with the defaults (loopback groups 5
# rounds, restores 10, reference (ref) rows 3, remote stores on 1 GiB
# only), estimated from the code, the last full run's wall times and
# small runs:
#   builds                                              2 min
#   fills (once, then cached in bench-out/etcd)         2 min
#   256 MiB, every group                               10 min
#   1 GiB loopback: backups 11, restores 11, copy 1    23 min
#   1 GiB remote stores (3 RTTs, CLI export rows too)  40-45 min
#   2 GiB: backups 19, restores 20, copy 2             41 min
#   pitr                                                4 min
#   pitr-remote (3 stores)                              4-5 min
#   pitr-restore                                       10-15 min, more on a slow disk
#   replicate                                           2 min
#   seed                                               5-10 min, up to 35 on a slow disk
#   recovery (from the code: 300,000 puts, a full      5-8 min, at most about 15
#     backup and the catch-up of the 1 GiB etcd)
#   in all                                             about 2h35-2h55
# While a compared mode of a judged group (loopback backups and
# restores) has fewer than 5 quiet rounds, rounds are added up to
# -max-runs 7 (restores 14): up to about 15 minutes more on a busy
# machine; a mode still short of 5 quiet rounds gets "unclear". The run
# is longer than a 2-hour sitting: start it first, and run it again to
# continue if it is interrupted (below).
# Interrupted, `make bench` again on the same clean commit with the same
# flags, machine and toolchain continues: the groups and steps done are
# kept, the others run whole, and the report says when each ran (BENCH_RESUME=
# starts over). An unfinished run it cannot continue is kept in
# bench-out/results-<start>.json.
# BENCH_FLAGS, PITR_FLAGS, PITR_REMOTE_FLAGS, PITR_RESTORE_FLAGS,
# REPLICATE_FLAGS, SEED_FLAGS and RECOVERY_FLAGS pass flags, e.g.
# BENCH_FLAGS='-sizes 256MiB,1GiB'.
BENCH_RESUME ?= -resume
.PHONY: bench
bench: $(TOOLS)/minio
	go build -o bench-out/etcdbackup-bench ./internal/bench
	go build -tags benchlean -o bench-out/etcdbackup-bench-lean ./internal/bench
	@cli=$$(mktemp -d) && trap 'rm -rf "$$cli"' EXIT && \
	echo "$(RELEASE_BUILD) -o $$cli/etcdbackup ./examples/etcdbackup" && \
	$(RELEASE_BUILD) -o "$$cli/etcdbackup" ./examples/etcdbackup && \
	bench-out/etcdbackup-bench -cli "$$cli/etcdbackup" $(BENCH_RESUME) $(BENCH_FLAGS)
	bench-out/etcdbackup-bench pitr $(BENCH_RESUME) $(PITR_FLAGS)
	bench-out/etcdbackup-bench pitr-remote $(BENCH_RESUME) $(PITR_REMOTE_FLAGS)
	bench-out/etcdbackup-bench pitr-restore $(BENCH_RESUME) $(PITR_RESTORE_FLAGS)
	bench-out/etcdbackup-bench replicate $(BENCH_RESUME) $(REPLICATE_FLAGS)
	bench-out/etcdbackup-bench seed $(BENCH_RESUME) $(SEED_FLAGS)
	bench-out/etcdbackup-bench recovery $(BENCH_RESUME) $(RECOVERY_FLAGS)

# bench-pitr: continuous backup at 1,000 writes/s of 1 KiB for 60 s after
# the follower's own full backup of the 1 GiB etcd: commit lag p50/p99,
# the follower's peak RSS, offline replay speed, then the compaction of
# the chain into a synthetic full backup (events/s, peak RSS) and the
# restore of the newest point from it. Adds its figures to
# bench-out/results.json and renders BENCHMARKS.md again.
# PITR_FLAGS passes flags, e.g. PITR_FLAGS='-duration 10s -full 0'.
.PHONY: bench-pitr
bench-pitr: $(TOOLS)/minio
	go build -o bench-out/etcdbackup-bench ./internal/bench
	go build -tags benchlean -o bench-out/etcdbackup-bench-lean ./internal/bench
	bench-out/etcdbackup-bench pitr $(PITR_FLAGS)

# bench-pitr-restore: a full backup of the 1 GiB etcd (the fill bench
# caches), then 3.6 million puts of 1 KiB (an hour at 1,000/s) stored by a
# follower; the restore of the last revision against the restore of the
# full backup alone, then after compacting the chain. About 10 minutes;
# adds its figures to
# bench-out/results.json and renders BENCHMARKS.md again.
# PITR_RESTORE_FLAGS passes flags, e.g. PITR_RESTORE_FLAGS='-writes 100000'.
.PHONY: bench-pitr-restore
bench-pitr-restore: $(TOOLS)/minio
	go build -o bench-out/etcdbackup-bench ./internal/bench
	go build -tags benchlean -o bench-out/etcdbackup-bench-lean ./internal/bench
	bench-out/etcdbackup-bench pitr-restore $(PITR_RESTORE_FLAGS)

# bench-recovery: a follower of the 1 GiB etcd stops, 300,000 puts are
# written, then it starts again while etcd takes 2,000 writes/s of 1 KiB:
# when the newest state is protected again, when the lag is back under
# 2 s, when the old chain's tail is caught up, and the lag along the way.
# Adds its figures to bench-out/results.json and renders BENCHMARKS.md
# again. RECOVERY_FLAGS passes flags, e.g. RECOVERY_FLAGS='-full 0 -behind 60000'.
.PHONY: bench-recovery
bench-recovery: $(TOOLS)/minio
	go build -o bench-out/etcdbackup-bench ./internal/bench
	go build -tags benchlean -o bench-out/etcdbackup-bench-lean ./internal/bench
	bench-out/etcdbackup-bench recovery $(RECOVERY_FLAGS)
