package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestForever(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := Forever(ctx, nil, "op", time.Millisecond, 4*time.Millisecond, func() error {
		if n++; n < 5 {
			return errors.New("transient")
		}
		return nil
	}); err != nil || n != 5 {
		t.Fatalf("err %v after %d calls", err, n)
	}
	stop := errors.New("over budget")
	n = 0
	if err := Forever(ctx, nil, "op", time.Millisecond, time.Millisecond, func() error { n++; return Permanent(stop) }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("permanent: %v after %d calls", err, n)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	down := errors.New("clickhouse down")
	err := Forever(cctx, nil, "op", time.Millisecond, 2*time.Millisecond, func() error { return down })
	if !errors.Is(err, down) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after ctx end: %v", err)
	}
}
