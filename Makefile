# airlock — build, run, test, benchmark.
#
#   make build     bin/airlock (the sidecar) and bin/airlock-kube (webhook, node agent, sandbox
#                  --backend kubernetes; airlock runs it for those commands), both static
#   make run       build and start airlock on loopback with deploy/examples/policy.yaml
#   make demo      (root) a local sandbox in a throwaway world: allowed, denied, credential, LLM call
#   make image     airlock's image tarball (offline, reproducible): bin/airlock-image.tar
#   make kubecluster  build/cache the test cluster's binaries (for AIRLOCK_CLUSTER_TESTS=1)
#   make s3test    build/cache the S3 test server (versitygw) the audit shipping tests run
#   make debianimage  (root) build/cache the Debian test image (mmdebstrap) the image tests use
#   make deps      (root, Debian 12) install the packages the tests need (tools/deps.sh)
#   make test      vet + every test, privileged ones included when run as root
#   make bench     proxied req/s (HTTP and HTTPS) against direct, Squid and tinyproxy, as ratios
#   make bench-kube  on the test cluster: apply->Ready with and without injection, sidecar RSS
#   make lint      gofmt, go vet, staticcheck
#   make generate  regenerate generated code (go generate ./...)
#   make fuzz      run each fuzz target for FUZZTIME (default 30s)

GO          ?= go
BIN         ?= bin/airlock
# airlock-kube sits next to airlock, where airlock looks for it first.
KUBE_BIN    ?= $(dir $(BIN))airlock-kube
# Static binaries, as in the image (internal/imagebuild): nothing in airlock needs cgo, and a
# static sidecar starts with less resident memory (tools/bench/README.md).
CGO_ENABLED ?= 0
CACHE       ?= .cache
STATE_DIR   ?= $(CACHE)/state
POLICY      ?= deploy/examples/policy.yaml
PROXY_ADDR  ?= 127.0.0.1:3128
ADMIN_ADDR  ?= 127.0.0.1:9090
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30s
# bpf/ is compiled by Debian bookworm's clang 14 (bpf2go); the committed ebpf/airlock_bpfel.o is
# its output byte for byte, and CI regenerates and diffs it, so another clang is refused.
BPF_CLANG       ?= clang
BPF_CLANG_MAJOR ?= 14
TESTFLAGS   ?=
BENCHFLAGS  ?=

.PHONY: all build image run demo deps test vaulttest s3test debianimage kubecluster bench bench-kube lint generate fuzz clean

all: build

# airlock (cmd/airlock) is the sidecar and every command but the Kubernetes ones, without the
# Kubernetes client (which costs every sidecar about 6 MiB at idle). airlock-kube
# (cmd/airlock-kube) has webhook, node and sandbox create|list|delete --backend kubernetes;
# airlock runs it for those.
build:
	CGO_ENABLED=$(CGO_ENABLED) $(GO) build -o $(BIN) ./cmd/airlock
	CGO_ENABLED=$(CGO_ENABLED) $(GO) build -o $(KUBE_BIN) ./cmd/airlock-kube

# airlock's image, with no daemon and no registry: same commit and Go version, same digest (the
# timestamps are the commit's). Push it with crane or skopeo: see docs/kubernetes.md.
IMAGE     ?= bin/airlock-image.tar
IMAGE_REF ?= ghcr.io/airlock-dev/airlock:dev
image:
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) $(GO) run ./internal/imagebuild/airlockimage -out $(IMAGE) -ref $(IMAGE_REF)

run: build
	@echo "airlock: explicit proxy on http://$(PROXY_ADDR), admin on http://$(ADMIN_ADDR), policy $(POLICY)"
	@echo "  allowed: curl -x http://$(PROXY_ADDR) https://pypi.org/simple/"
	@echo "  denied:  curl -i -x http://$(PROXY_ADDR) http://evil.example/   (403 + JSON reason)"
	@echo "  explain: $(BIN) policy explain $(POLICY) --url https://api.github.com/repos/acme/app"
	@echo "  DNS:     dig @127.0.0.1 -p 5353 pypi.org   (allowed, forwarded)   dig @127.0.0.1 -p 5353 evil.example   (REFUSED)"
	@echo "  models:  curl http://127.0.0.1:4000/v1/models   (the policy's llm.models; usage: $(BIN) usage --state-dir $(STATE_DIR))"
	@echo "  metrics: curl http://$(ADMIN_ADDR)/metrics     decisions: curl http://$(ADMIN_ADDR)/v1/decisions"
	@echo "  CA (for intercepted hosts): $(BIN) ca export --state-dir $(STATE_DIR) > airlock-ca.pem"
	@echo "  stop with Ctrl-C"
	$(BIN) run --policy $(POLICY) --state-dir $(STATE_DIR) --proxy-addr $(PROXY_ADDR) --admin-addr $(ADMIN_ADDR) --sandbox make-run

# A sandbox with deploy/examples/sandbox-policy.yaml in a world of its own (two network
# namespaces, a DNS server, an HTTPS API, a fake model provider); this machine's own network
# namespace is never touched, and everything is removed at the end, on Ctrl-C too.
demo: build
	@[ "$$(id -u)" = 0 ] || { echo "make demo: needs root (network namespaces, cgroups, eBPF): sudo make demo"; exit 1; }
	$(GO) run ./tools/demo --bin $(BIN) --policy deploy/examples/sandbox-policy.yaml

# The credential tests run a real Vault (test/vaulttest/server, its own module: Vault's
# BUSL code is never linked into airlock), with Vault's Transit engine as an external plugin
# (test/vaulttest/transit, another module). The binaries are built once into $(CACHE)/ and
# rebuilt only when their sources change; the first build takes minutes.
vaulttest:
	$(GO) run ./test/vaulttest/buildserver

# The audit shipping tests run a real S3 server: versitygw with its posix backend
# (test/s3test/server, its own module), built once into $(CACHE)/ keyed on its go.mod and
# go.sum; a cold build takes about 5 minutes on 2 cores.
s3test:
	$(GO) run ./test/s3test/buildserver

# The image tests (sandbox/image, test/e2e) unpack a real Debian root filesystem made by
# mmdebstrap (as root) from the Debian archive, cached in $(CACHE)/ keyed on its inputs; a cold
# build takes about 100 s, network bound. The tests build it when it is missing; CI builds it
# first, so that it is not spent beside them.
debianimage:
	$(GO) run ./test/imagetest/builddebian

# The real-cluster tests (test/kubecluster, AIRLOCK_CLUSTER_TESTS=1) run Kubernetes 1.37
# built from source through test/kubecluster/build (its own module) and containerd, runc,
# CNI plugins and nft unpacked from Debian packages (needs apt-get update; nothing is
# installed). Everything is cached in $(CACHE)/kubecluster; a cold build takes 6-10 minutes.
kubecluster:
	$(GO) run ./test/kubecluster/buildcluster

# The packages the tests need: tools/deps.sh says which, in one place. make test installs what
# is missing first when it runs as root on Debian 12 (AIRLOCK_NO_INSTALL=1 stops that), and
# otherwise names what is missing and how to install it.
deps:
	tools/deps.sh install test

# -timeout is go test's limit per package (10 minutes by default): test/e2e and
# test/e2e/cluster each take 6-10 minutes and run side by side on 2 cores, so a loaded
# machine can pass 10 without anything hanging; the budget for all of make test is 15 minutes
# warm, measured by .ci/run, not by this limit.
# -vet=off: go vet ./... has just run every analyzer go test would run again per package.
test: vaulttest s3test
	@tools/deps.sh ensure test
	$(GO) vet ./...
	$(GO) test -race -vet=off -count=1 -timeout 30m $(TESTFLAGS) ./...

bench:
	@tools/deps.sh ensure bench
	$(GO) run ./tools/bench $(BENCHFLAGS)

# On a real test cluster with the webhook and the node agent installed: apply->Ready of a
# labelled pod and an unlabelled one (Pod Security "restricted"), and the injected sidecar's
# RSS at idle and with 1 000 open tunnels. Root and the cluster binaries (make kubecluster).
bench-kube: kubecluster
	AIRLOCK_CLUSTER_TESTS=1 AIRLOCK_PRIVILEGED_TESTS=1 AIRLOCK_CLUSTER_BENCH=1 $(GO) test -count=1 -timeout 40m -run '^TestKubeBench$$' -v ./test/e2e/cluster/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

generate:
	@v=$$($(BPF_CLANG) --version 2>/dev/null | head -1); case "$$v" in *"clang version $(BPF_CLANG_MAJOR)."*) ;; \
	  *) echo "make generate: bpf/ must be compiled with clang $(BPF_CLANG_MAJOR) (apt-get install clang llvm libbpf-dev); found: $${v:-none}"; exit 1;; esac
	BPF2GO_CC=$(BPF_CLANG) $(GO) generate ./...

# Every Fuzz* target of every package, one after the other (go test fuzzes one at a time).
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=0 $$pkg; \
	  done; \
	done

clean:
	rm -rf bin $(CACHE)
