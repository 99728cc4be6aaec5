// Package syncer will hold the library that places workloads from logical
// clusters onto physical Kubernetes clusters (push mode in-process, pull mode
// in cmd/syncer). Nothing is implemented yet.
package syncer
