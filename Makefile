# The front door. Every target is a line or two that calls Go.
K8S_VERSION := v1.37.2
K8S_LDFLAGS := $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=37 -X $(p).gitTreeState=clean)
GOFLAGS_BUILD := -ldflags "-s -w $(K8S_LDFLAGS)"
export CGO_ENABLED := 1

.PHONY: build run test unit e2e faults physical-cluster conformance bench bench-quick bench-sync bench-failover bench-apis bench-scale lint clean

build:
	go build $(GOFLAGS_BUILD) -o bin/ ./cmd/kcp ./cmd/kubectl-kcp ./cmd/syncer
	ln -sf kubectl-kcp bin/kubectl-ws

bin/kubectl:
	go build $(GOFLAGS_BUILD) -o bin/kubectl ./test/tools/kubectl

run: build
	bin/kcp start

# The longest packages first: go test runs as many packages at once as there are
# processors, in the order given, so the multi-cluster suite (the longest) starts
# at once beside the single-cluster one instead of after a shorter package.
TEST_FIRST := ./test/e2e/multicluster ./test/e2e ./test/e2e/crds

test: build bin/kubectl
	go test -count=1 -timeout 60m $(TEST_FIRST) ./...

unit:
	go test -count=1 $$(go list ./... | grep -v /test/)

e2e: build bin/kubectl
	go test -count=1 -timeout 60m $(TEST_FIRST) ./test/e2e/...

# Local physical clusters (kube-apiserver, kcm, scheduler, kine, KWOK nodes)
# for the multi-cluster walk-through; Ctrl-C stops them, state stays in .physical.
physical-cluster:
	go run ./test/tools/physical-cluster -dir .physical -clusters 2

# Fault injection, also PostgreSQL restarted and crashed (restarts the local
# server: never in CI). PG_RESTART/PG_CRASH fit a Debian cluster; override them.
PG_RESTART ?= pg_ctlcluster 15 main restart
PG_CRASH ?= pg_ctlcluster 15 main stop -m immediate && pg_ctlcluster 15 main start
faults: build bin/kubectl
	KCP_TEST_PG_RESTART="$(PG_RESTART)" KCP_TEST_PG_CRASH="$(PG_CRASH)" go test -count=1 -v -timeout 20m -run 'TestFault|TestWatchConsistency|TestSIGTERM' ./test/e2e/

conformance: build bin/kubectl
	KCP_CONFORMANCE=1 go test -count=1 -v -timeout 90m ./test/conformance/

lint:
	go vet ./...
	test -z "$$(gofmt -l client cmd server storage migrations schema syncer test)"

clean:
	rm -rf bin

bench: build
	go run ./test/bench -write docs/performance.md
	go run ./test/bench -sync
	go run ./test/bench -failover
	go run ./test/bench -noisy
	go run ./test/bench -quotas
	go run ./test/bench -apis
	go run ./test/bench -scale-only

# Failover numbers only: three physical clusters, a divided Deployment, one
# cluster killed per run, with the default and the fastest settings.
bench-failover: build
	go run ./test/bench -failover

# Multi-cluster numbers only: a physical cluster, a syncer, placed workspaces.
bench-apis: build
	go run ./test/bench -apis

# Workspaces at 1,000 / 10,000 / 100,000 (seeded rows, then a restart):
# start-up time, memory per workspace, creation rate at that size. Needs
# about 12 GiB of memory at 100,000; docs/performance.md.
bench-scale: build
	go run ./test/bench -scale-only

bench-sync: build
	go run ./test/bench -sync

bench-quick: build
	go run ./test/bench -creates 500 -clusters 4 -workspaces 200 -crd-clusters 50 -list-totals 10000:100 -list-samples 100 -compare-ops 300 -compare-rounds 1 -feature-cost=false -latency-samples 50
