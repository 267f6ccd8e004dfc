package testenv

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// FillVolume writes zeros to the file at path until its volume is full, then gives back leave
// bytes: a volume with a known, small room left.
func FillVolume(t testing.TB, path string, leave int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(max(fi.Size()-leave, 0)); err != nil {
		t.Fatal(err)
	}
}
