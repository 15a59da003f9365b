// Package pinfile reads and appends a client's pin files: text files of
// "EPOCH VALUE" lines (VALUE hex, one line per epoch) holding what a client
// saw first for an epoch — the randomness service's OPRF public key
// (ingest/oprfclient), the issuer's key fingerprint (ingest/tokenclient) —
// so that a later run refuses anything else (trust on first use across
// restarts; RFC 9576 §6.2, key consistency).
package pinfile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Lookup returns the value pinned for epoch in the file at path; found is
// false when the file does not exist or has no line for epoch. Lines that
// are not two fields are skipped. Errors when the file cannot be read.
func Lookup(path, epoch string) (value string, found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("pin file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == epoch {
			return fields[1], true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, fmt.Errorf("pin file %s: %w", path, err)
	}
	return "", false, nil
}

// Append adds the line "epoch value" to the file at path, creating it
// (0600) and its directory (0700) when missing, and syncs it to disk
// before returning. Callers serialize Lookup-then-Append themselves.
func Append(path, epoch, value string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pin file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("pin file: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%s %s\n", epoch, value); err != nil {
		f.Close()
		return fmt.Errorf("pin file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("pin file %s: %w", path, err)
	}
	return f.Close()
}
