package truth

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Subset writes the header and the rows of the first n users (by first
// appearance) of the gzip AOL log src to dir/first-N-users.tsv.gz and returns
// its path. Tests use it to run the pipeline on a smaller real log.
func Subset(src, dir string, n int) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("first-%d-users.tsv.gz", n))
	out, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer out.Close()
	zw := gzip.NewWriter(out)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	users := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		u, _, _ := strings.Cut(line, "\t")
		if u != "AnonID" && !users[u] {
			if len(users) == n {
				break
			}
			users[u] = true
		}
		if _, err := zw.Write([]byte(line + "\n")); err != nil {
			return "", err
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return path, out.Close()
}
