//go:build unix

package atomicfile

import (
	"errors"
	"syscall"
)

// isInvalid: fsync of a directory is refused with EINVAL on some file
// systems (and is then not needed).
func isInvalid(err error) bool { return errors.Is(err, syscall.EINVAL) }
