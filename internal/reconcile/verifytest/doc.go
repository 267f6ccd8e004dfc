// Package verifytest holds the tests of internal/reconcile's verified selections, which run an
// Evaluator with internal/signature's verifiers and sign images with internal/testenv/signing.
// They live apart so that internal/reconcile's own test binary links neither sigstore nor
// notation; the package has no code of its own.
package verifytest
