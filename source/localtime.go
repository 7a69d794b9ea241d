package source

import (
	"context"
	"fmt"
	"strings"

	"github.com/syncd/syncd/config"
)

// utcZones are the TimeZone values that stamp a timestamp without time zone
// in UTC.
var utcZones = []string{"utc", "etc/utc", "gmt", "etc/gmt", "uct", "etc/uct", "z", "zulu", "etc/zulu",
	"universal", "etc/universal", "gmt0", "etc/gmt0", "gmt+0", "gmt-0", "etc/gmt+0", "etc/gmt-0", "greenwich", "etc/greenwich"}

// localZonesQuery lists the TimeZone values writers of this database get
// that are not UTC: from ALTER DATABASE / ALTER ROLE ... SET, and from the
// server's configuration file where the role may read pg_file_settings.
const localZonesQuery = `
SELECT DISTINCT v FROM (
  SELECT split_part(c, '=', 2) AS v, lower(split_part(c, '=', 1)) AS k
  FROM pg_db_role_setting s, unnest(s.setconfig) c
  WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
) x WHERE k = 'timezone' AND NOT (lower(v) = ANY($1::text[]))
ORDER BY v`

const fileZoneQuery = `SELECT setting FROM pg_file_settings WHERE lower(name) = 'timezone' AND applied AND error IS NULL ORDER BY seqno DESC LIMIT 1`

// LocalTimeWarning says, for a first cursor column of type timestamp
// without time zone, when writers of the source stamp it in a zone other
// than UTC: the read bound and the clock ceiling take its values as UTC, so
// a zone behind UTC lets the watermark pass rows a still-open transaction
// commits later, and a zone ahead of UTC makes every new row look stamped
// in the future. It returns "" when no such zone is set (or the column is
// another type, or source.bound is off).
func (r *Reader) LocalTimeWarning(ctx context.Context) (string, error) {
	if baseType(r.table.Cursor[0].Type) != "timestamp without time zone" || r.cfg.Source.Bound == config.BoundOff {
		return "", nil
	}
	rows, err := r.conn.Query(ctx, localZonesQuery, utcZones)
	if err != nil {
		return "", fmt.Errorf("read the TimeZone settings of the source for %s: %w", r.table.Ident, err)
	}
	var zones []string
	for rows.Next() {
		var z string
		if err := rows.Scan(&z); err != nil {
			rows.Close()
			return "", fmt.Errorf("read the TimeZone settings of the source for %s: %w", r.table.Ident, err)
		}
		zones = append(zones, z)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read the TimeZone settings of the source for %s: %w", r.table.Ident, err)
	}
	// The configuration file's zone is readable only by superusers (and
	// pg_read_all_settings); without the right it stays unknown.
	var file string
	if err := r.conn.QueryRow(ctx, fileZoneQuery).Scan(&file); err == nil && file != "" && !isUTC(file) {
		zones = append(zones, file+" (postgresql.conf)")
	}
	if len(zones) == 0 {
		return "", nil
	}
	return fmt.Sprintf("source.cursor's first column %q of %s is timestamp without time zone and writers of the source get TimeZone %s: syncd takes these values as UTC, so the read bound cannot hold back a late commit stamped in local time and rows may be skipped (only reconcile finds them); make the column timestamptz, or stamp it with now() AT TIME ZONE 'UTC', or set TimeZone = 'UTC' for the writers",
		r.table.Cursor[0].Name, r.table.Ident, strings.Join(zones, ", ")), nil
}

func isUTC(zone string) bool {
	z := strings.ToLower(strings.Trim(zone, `'" `))
	for _, u := range utcZones {
		if z == u {
			return true
		}
	}
	return false
}
