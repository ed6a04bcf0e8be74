//go:build linux && amd64

package ratekeeper

// The prebuilt static library for Linux x86_64 (glibc), then what it needs from the system
// (ffi-c/ratekeeper.pc.in's Libs.private, as `rustc --print native-static-libs` lists them).
// scripts/package puts it in lib/linux_amd64/ of the module archive; scripts/test-go puts the
// workspace's build there.

// #cgo LDFLAGS: ${SRCDIR}/lib/linux_amd64/libratekeeper.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"
