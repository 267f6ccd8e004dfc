// Package verifytest holds the tests of internal/reconcile's verified selections, which run an
// Evaluator with internal/signature's verifiers and sign images with internal/testenv/signing.
// They live outside internal/reconcile so that its tests (go test ./internal/reconcile/...) link
// neither sigstore nor notation; the package has no code of its own.
package verifytest
