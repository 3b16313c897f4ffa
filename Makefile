# etcdbackup — build, test and lint.
#
#   make test    install the test servers, run every test (race detector on,
#                integration tests required: a skipped test fails the run)
#   make lint    gofmt check, go vet, staticcheck
#   make tools   install the pinned tools into .tools/bin (reused when present)

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

TOOLS := $(CURDIR)/.tools/bin
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
STATICCHECK_VERSION := v0.8.2

# Tests find the MinIO server here; they fail (never skip) without it.
export ETCDBACKUP_MINIO_BIN := $(TOOLS)/minio

GO_TEST_FLAGS ?= -race -count=1 -timeout 60m

.PHONY: all tools test lint fmt

all: lint test

tools: $(TOOLS)/minio $(TOOLS)/staticcheck

$(TOOLS)/minio:
	@echo "installing minio $(MINIO_VERSION) into $(TOOLS) (a few minutes, once)"
	GOBIN=$(TOOLS) go install github.com/minio/minio@$(MINIO_VERSION)

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

test: $(TOOLS)/minio
	go test $(GO_TEST_FLAGS) -json ./... | go run ./internal/testreport

lint: $(TOOLS)/staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(TOOLS)/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
