package wait

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	t.Parallel()
	n := 0
	if err := Poll(t.Context(), time.Minute, time.Millisecond, func(context.Context) (bool, error) { n++; return n == 3, nil }); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	err := Poll(t.Context(), 20*time.Millisecond, time.Millisecond, func(context.Context) (bool, error) { return false, errors.New("apiserver down") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "apiserver down") {
		t.Fatalf("err = %v, want a deadline error carrying the last cond error", err)
	}
}
