package migrations

import (
	"context"

	"github.com/golang-migrate/migrate/v4"

	"github.com/kcpsql/kcp/storage/datastore"
)

// MigrateTo moves the datastore to schema version v, up or down.
func MigrateTo(_ context.Context, ds *datastore.Datastore, v uint) error {
	return withMigrate(ds, func(m *migrate.Migrate, _ uint) error {
		return m.Migrate(v)
	})
}
