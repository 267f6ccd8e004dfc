package verifytest_test

import (
	"testing"

	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
