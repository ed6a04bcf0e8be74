//go:build linux && arm64

package ratekeeper

// The prebuilt static library for Linux aarch64 (glibc 2.17 or later): scripts/package puts the
// aarch64 C tarball's libratekeeper.a in lib/linux_arm64/ of the module archive.

// #cgo LDFLAGS: ${SRCDIR}/lib/linux_arm64/libratekeeper.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"
