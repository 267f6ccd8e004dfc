package verifytest_test

import (
	"testing"

	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
)

// evalFixture is evaltest's fixture, with the helpers of this package's tests as its methods.
type evalFixture struct{ *evaltest.Fixture }

func newEvalFixture(t testing.TB) *evalFixture { return &evalFixture{evaltest.New(t)} }
