package ebpf

// The programs in bpf/airlock.c are compiled by clang ($BPF2GO_CC; the Makefile pins
// Debian's clang 14) through bpf2go, which go.mod pins as a tool. The generated files
// (airlock_bpfel.go, airlock_bpfel.o) are committed; `make generate` rebuilds them and CI
// fails when they drift. bpf2go strips DWARF and maps the source directory, so the output
// does not depend on where the tree lives.
//go:generate go tool bpf2go -target bpfel -type event -type allow_key -type allow_val -type listener_key -type cidr_key -type cidr_val -type settings -type orig_dst -type tuple_key -type counters -type schema_info -type mark -type exemption -type peer_val -type id_cidr_key -type dns_key airlock ../bpf/airlock.c -- -O2 -Wall -Werror -I../bpf -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
