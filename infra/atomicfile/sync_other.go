//go:build !unix

package atomicfile

// isInvalid: directories cannot be synced on this platform; the error is
// ignored.
func isInvalid(error) bool { return true }
