package attack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/ingest/apps"
)

// Snapshot rebuilds the aggregator's pending groups as a thief would: from
// a `crowdlog run --state` directory (FromState), or from the reports topic
// at broker opened with the aggregator key files keyPaths. It errors when
// neither source is given.
func Snapshot(ctx context.Context, state, broker string, keyPaths []string) ([]aggregator.PendingGroup, error) {
	switch {
	case state != "":
		return FromState(ctx, state)
	case broker != "" && len(keyPaths) > 0:
		keys, err := keydir.LoadKeyPairs(keyPaths)
		if err != nil {
			return nil, err
		}
		recs, err := ReadReportsTopic(ctx, broker)
		if err != nil {
			return nil, err
		}
		return Rebuild(recs, keys), nil
	}
	return nil, errors.New("give --state DIR, or --kafka ADDR with --key FILE")
}

// WriteSnapshotFile writes groups to path as JSON lines (WriteSnapshot).
func WriteSnapshotFile(path string, groups []aggregator.PendingGroup) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := WriteSnapshot(f, groups); err != nil {
		return err
	}
	return f.Close()
}

// ReadSnapshotFile reads a snapshot written by WriteSnapshotFile.
func ReadSnapshotFile(path string) ([]aggregator.PendingGroup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w (write one with `crowdlog attack snapshot`)", err)
	}
	defer f.Close()
	return ReadSnapshot(f)
}

// Candidates gathers a probe's candidate artifacts: the non-empty lines of
// each file of files, then the artifacts app mines from the AOL log at
// logPath (when not empty). It errors when there are none.
func Candidates(files []string, logPath, app string) ([]string, error) {
	var cands []string
	for _, p := range files {
		l, err := readLines(p)
		if err != nil {
			return nil, err
		}
		cands = append(cands, l...)
	}
	if logPath != "" {
		a, err := apps.Lookup(app)
		if err != nil {
			return nil, err
		}
		counts, err := LogCounts(logPath, a)
		if err != nil {
			return nil, err
		}
		for _, c := range counts {
			cands = append(cands, c.Artifact)
		}
	}
	if len(cands) == 0 {
		return nil, errors.New("no candidates: give --candidates FILE or --log LOG")
	}
	return cands, nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}
