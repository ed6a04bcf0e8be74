//go:build linux && arm64

package ratekeeper

// The prebuilt static library for Linux aarch64 (glibc): the slot the platforms work fills
// (scripts/package puts an aarch64 build in lib/linux_arm64/ once it makes one; until then the
// archive has none and a build for linux/arm64 fails at link time, naming this file).

// #cgo LDFLAGS: ${SRCDIR}/lib/linux_arm64/libratekeeper.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"
