// Package lint holds tests that read the module's source as syntax and fail on shapes the
// project keeps out of its code, such as functions with long parameter lists. It has no code
// that other packages import.
package lint
