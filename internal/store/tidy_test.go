package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/testenv"
)

// Sessions that each write lists which never change again leave a value-log
// file each; a writer closing with nobody waiting rewrites the lists and
// the next ones reclaim the files, so their number stays bounded.
func TestValueLogFilesStayBounded(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	sessions := 60
	if testing.Short() {
		sessions = 40
	}
	most := 0
	for i := range sessions {
		s := New(dir, WithLinger(0))
		if _, _, err := s.Put(ctx, fmt.Sprintf("ns/r%d", i), testID, manyTags(500, fmt.Sprintf("s%d-", i)), time.Now()); err != nil {
			t.Fatal(err)
		}
		// The linger ends at once: the close is an idle one, which tidies.
		waitIdle(t, s)
		most = max(most, valueLogFiles(dir))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A close's GC is bounded by time (tidyGCBudget), so on a loaded machine a close may reclaim
	// a file fewer than on an idle one; without tidying, every session would leave one more.
	if limit := maxValueLogFiles + 4; most > limit {
		t.Errorf("value-log files reached %d, want at most %d", most, limit)
	}
	r := New(dir, ReadOnly())
	defer r.Close()
	for i := range sessions {
		e, err := r.Get(ctx, fmt.Sprintf("ns/r%d", i), testID)
		if err != nil || len(e.Tags) != 500 {
			t.Fatalf("ns/r%d after the rewrites: %d tags, %v", i, len(e.Tags), err)
		}
	}
	keys, err := r.Keys(ctx)
	if err != nil || len(keys) != sessions {
		t.Fatalf("Keys = %d keys, %v; want %d", len(keys), err, sessions)
	}
	t.Logf("at most %d value-log files over %d sessions", most, sessions)
}

// A writer that always hands the directory to a waiting reader still
// tidies once the value log is overdue.
func TestValueLogFilesStayBoundedUnderReaders(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	sessions := 80
	if testing.Short() {
		sessions = 50
	}
	w := New(dir, WithLinger(time.Hour))
	defer w.Close()
	r := New(dir, ReadOnly(), WithLinger(0))
	defer r.Close()
	most := 0
	for i := range sessions {
		if _, _, err := w.Put(ctx, fmt.Sprintf("ns/r%d", i), testID, manyTags(500, fmt.Sprintf("s%d-", i)), time.Now()); err != nil {
			t.Fatal(err)
		}
		// The reader waits, so the writer yields instead of lingering.
		if _, err := r.Get(ctx, fmt.Sprintf("ns/r%d", i), testID); err != nil {
			t.Fatal(err)
		}
		most = max(most, valueLogFiles(dir))
	}
	if most > 2*maxValueLogFiles+2 {
		t.Errorf("value-log files reached %d, want at most %d", most, 2*maxValueLogFiles+2)
	}
	t.Logf("at most %d value-log files over %d hand-overs", most, sessions)
}

// waitIdle waits until the Store has closed its database.
func waitIdle(t testing.TB, s *Store) {
	t.Helper()
	testenv.EventuallyEvery(t, 10*time.Second, time.Millisecond, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.state != stateIdle {
			return errors.New("the database is still open")
		}
		return nil
	})
}
