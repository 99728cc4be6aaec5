package migrations

import (
	"context"

	"github.com/golang-migrate/migrate/v4"

	"github.com/kcpsql/kcp/storage/datastore"
)

// Down migrates the datastore all the way down, for tests that every down
// migration applies and undoes its up. kcp itself never migrates down.
func Down(_ context.Context, ds *datastore.Datastore) error {
	return withMigrate(ds, func(m *migrate.Migrate, _ uint) error { return m.Down() })
}
