// Package schema will hold kcp's own API types (tenancy.kcp.io,
// workload.kcp.io, apiresource.kcp.io) and their CRDs. The foundation serves
// only upstream APIs; the first types arrive with workspaces.
package schema
