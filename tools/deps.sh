#!/usr/bin/env bash
# tools/deps.sh: the one place that says which Debian 12 packages airlock's tests (and its
# benchmark) need, and installs them.
#
#   tools/deps.sh install [GROUP]   install what GROUP needs (as root, Debian 12), printing each
#                                   package first; `make deps` and .ci/run call this
#   tools/deps.sh ensure [GROUP]    what `make test` runs first: nothing when all is there;
#                                   else installs it as `install` does when run as root on
#                                   Debian 12 (unless AIRLOCK_NO_INSTALL=1), and otherwise
#                                   prints one line naming what is missing and how to install it
#   tools/deps.sh list [GROUP]      the packages, one a line
#
# GROUP is `test` (the default) or `bench` (test's packages and the alternatives make bench
# runs against). An issue that needs a package adds it here, and only here.
set -euo pipefail

# test: what `make test` runs.
#   curl, git, python3: real clients in the end-to-end tests; iproute2: network namespaces and
#   veths; util-linux: nsenter, unshare; dnsutils: dig against the DNS filter;
#   clang, llvm (llvm-strip), libbpf-dev, linux-libc-dev: bpf2go compiles bpf/ (make generate);
#   bpftool: inspecting pins when a kernel test fails; make, ca-certificates: the build;
#   nodejs, npm: the official OpenAI and Anthropic Node SDKs and undici in the tests;
#   squid-openssl: the corporate upstream proxy (plain and ssl-bump) of test/e2e's
#   upstream-proxy tests; runc, crun: the OCI runtimes every local sandbox runs in (runc is
#   the default, the isolation tests run on both); procps: ps inside sandboxes in the
#   isolation tests; runsc: gVisor, the third runtime (--runtime runsc, TestSandboxRunsc);
#   e2fsprogs: mkfs.ext4 for a sandbox's --disk; busybox-static, mmdebstrap: the tiny and the
#   Debian images of the sandbox --image tests (test/imagetest; mmdebstrap fetches from the
#   Debian archive once, cached in .cache); openssh-client: git push over SSH as an identity
#   in test/e2e (the SSH server is the tests' own, golang.org/x/crypto/ssh).
test_pkgs=(curl git python3 iproute2 util-linux dnsutils ca-certificates make
	clang llvm libbpf-dev linux-libc-dev bpftool nodejs npm squid-openssl runc crun procps
	runsc e2fsprogs busybox-static mmdebstrap openssh-client)

# bench: make bench's load generators and the alternatives it measures airlock against.
bench_pkgs=(wrk nghttp2-client tinyproxy dnsperf dnsmasq-base)

pkgs_of() {
	case "${1:-test}" in
	test) printf '%s\n' "${test_pkgs[@]}" ;;
	bench) printf '%s\n' "${test_pkgs[@]}" "${bench_pkgs[@]}" ;;
	*) echo "tools/deps.sh: unknown group ${1} (test or bench)" >&2; exit 2 ;;
	esac
}

# installed says whether a package is present. nodejs and npm count as present when the
# commands are (a NodeSource nodejs bundles npm, and Debian's npm would conflict with it).
installed() {
	case "$1" in
	nodejs) command -v node >/dev/null && return 0 ;;
	npm) command -v npm >/dev/null && return 0 ;;
	esac
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing_of() {
	local p
	for p in $(pkgs_of "$1"); do
		installed "$p" || echo "$p"
	done
}

is_debian12() {
	[ -r /etc/os-release ] && . /etc/os-release && [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ]
}

install_pkgs() {
	[ $# -gt 0 ] || return 0
	local p
	for p in "$@"; do echo "tools/deps.sh: installing $p"; done
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "$@"
}

cmd="${1:-ensure}"
group="${2:-test}"
case "$cmd" in
list) pkgs_of "$group" ;;
install)
	[ "$(id -u)" = 0 ] || { echo "tools/deps.sh: install needs root (sudo tools/deps.sh install $group)" >&2; exit 1; }
	mapfile -t missing < <(missing_of "$group")
	install_pkgs "${missing[@]}"
	;;
ensure)
	mapfile -t missing < <(missing_of "$group")
	[ ${#missing[@]} -eq 0 ] && exit 0
	if [ "$(id -u)" = 0 ] && is_debian12 && [ "${AIRLOCK_NO_INSTALL:-}" != 1 ]; then
		install_pkgs "${missing[@]}"
	else
		hint="sudo make deps"
		[ "$group" = test ] || hint="sudo tools/deps.sh install $group"
		echo "missing: ${missing[*]}; install with: $hint (or apt-get install -y ${missing[*]})" >&2
		exit 1
	fi
	;;
*) echo "usage: tools/deps.sh install|ensure|list [test|bench]" >&2; exit 2 ;;
esac
