// Package atomicfile writes the small state and key files of crowdlog's
// roles so that no reader and no crash ever sees a partial file: the data
// goes to a temporary file in the target's directory, is synced, renamed
// over the target (rename(2) is atomic within one file system, POSIX.1-2017
// "rename"), and the directory is synced so the rename itself survives a
// crash. A file that already holds the data is left alone, so a role that
// rewrites a marker at every start (the custody marker of a keys directory
// shared by two roles) never replaces a file another process is reading.
//
// The temporary file and the rename are github.com/google/renameio/v2's
// (docs/decisions.md, "State files are written atomically"). Big
// append-only logs and broker data are not written through this package.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// WriteFile makes path hold exactly data. When path already holds data it
// returns nil without writing (its mode is kept). Otherwise it writes a
// temporary file beside path (".NAME" plus a random suffix; mode perm less
// the umask, or the mode of the existing file it replaces, as os.WriteFile
// keeps it), syncs it, renames it over path and syncs path's directory.
// On an error path is unchanged (the previous content or no file) and the
// temporary file is removed; errors name path.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	if Same(path, data) {
		return nil
	}
	dir := filepath.Dir(path)
	if err := renameio.WriteFile(path, data, perm, renameio.WithTempDir(dir)); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Same reports whether path is a regular file holding exactly data (false
// when it cannot be read).
func Same(path string, data []byte) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) {
		return false
	}
	old, err := os.ReadFile(path)
	return err == nil && bytes.Equal(old, data)
}

// SyncDir fsyncs directory dir, making the renames and creations in it
// durable (fsync(2) on a directory; a no-op error on file systems that
// refuse it, EINVAL, is ignored).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !isInvalid(err) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// CreateOnce writes data to path only when path does not exist yet: a
// temporary file beside path (mode perm, exactly) is written,
// synced and hard-linked to path (link(2) fails when path exists, so of
// two writers racing exactly one wins and a reader sees either no file or
// the whole file), then removed, and the directory synced. It returns an
// error wrapping fs.ErrExist when path already exists (its content is not
// compared); other errors name path.
func CreateOnce(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: %w", path, fs.ErrExist)
		}
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}
