package reliability

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/internal/pgtest"
)

// newRole creates a login role with a password on the test server and drops
// it (and its grants in db) when the test ends.
func newRole(t *testing.T, db *pgtest.DB, prefix string) (name, password string) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name = prefix + "_" + hex.EncodeToString(b)
	password = "Pw-" + hex.EncodeToString(b) + "-s3cr3t"
	db.Exec(t, `CREATE ROLE `+name+` LOGIN PASSWORD '`+password+`'`)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = db.Pool.Exec(ctx, `DROP OWNED BY `+name)
		conn, err := pgx.Connect(ctx, pgtest.AdminURL(t))
		if err != nil {
			t.Errorf("connect to drop role %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	return name, password
}

// roleURL is db's URL logged in as role with password.
func roleURL(t *testing.T, db *pgtest.DB, role, password string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	return u.String()
}

// TestPasswordsNeverPrinted runs every command, on success and on failure
// (wrong port, unknown host, malformed DSN, lock held), with DSNs carrying
// a password inline, through ${VAR} and through dsn_file, and greps
// everything syncd printed and stored for the password.
func TestPasswordsNeverPrinted(t *testing.T) {
	db := pgtest.NewDB(t)
	faultTable(t, db.Pool, 500)
	role, pw := newRole(t, db, "syncd_sec")
	db.Exec(t, `GRANT SELECT ON src TO `+role)
	db.Exec(t, `GRANT CREATE ON SCHEMA public TO `+role)
	good := roleURL(t, db, role, pw)
	dir := t.TempDir()
	dsnFile := writeFile(t, dir, "dsn.secret", good+"\n")
	wrongPort := strings.Replace(good, "127.0.0.1:5432", "127.0.0.1:1", 1)
	if wrongPort == good {
		t.Fatalf("test server URL %s is not on 127.0.0.1:5432; cannot derive a wrong port", db.URL)
	}
	badHost := strings.Replace(good, "127.0.0.1:5432", "no-such-host.invalid:5432", 1)
	kv := "host=127.0.0.1 port=1 dbname=" + db.Name + " user=" + role + " password=" + pw + " connect_timeout=2"
	malformedURL := "postgres://" + role + ":" + pw + "@127.0.0.1:notaport/" + db.Name
	malformedKV := "host=127.0.0.1 port=5432 user=" + role + " password=" + pw + " dbname='" + db.Name

	type variant struct {
		name, srcDSN, sinkDSN string
		env                   []string
	}
	variants := []variant{
		{"inline", good, good, nil},
		{"env var", "${SYNCD_TEST_DSN}", "${SYNCD_TEST_DSN}", []string{"SYNCD_TEST_DSN=" + good}},
		{"dsn_file", "", "", nil},
		{"wrong port", wrongPort, good, nil},
		{"wrong sink port", good, wrongPort, nil},
		{"unknown host", badHost, good, nil},
		{"key=value wrong port", kv, kv, nil},
		{"malformed URL", malformedURL, good, nil},
		{"malformed key=value", malformedKV, good, nil},
	}
	var printed strings.Builder
	commands := 0
	for i, v := range variants {
		body := tableConfig{Name: "sec", SourceDSN: yamlQuote(v.srcDSN), Table: "public.src", Cursor: "[updated_at, id]",
			SinkDSN: yamlQuote(v.sinkDSN), SinkTable: "public.copy_" + string(rune('a'+i)), PageSize: 100}.YAML()
		if v.name == "dsn_file" {
			body = strings.ReplaceAll(body, `dsn: ""`, "dsn_file: "+dsnFile)
		}
		cfg := writeFile(t, dir, "sec"+string(rune('a'+i))+".yaml", body)
		state := filepath.Join(dir, "state"+string(rune('a'+i))+".db")
		for _, args := range [][]string{
			{"validate", "--config", cfg},
			{"run", "--once", "--config", cfg, "--state", state},
			{"run", "--once", "--config", cfg, "--state", state, "--log-level", "debug"},
			{"status", "--config", cfg, "--state", state},
			{"status", "--json", "--config", cfg, "--state", state},
			{"resync", "--config", cfg, "--state", state, "--source", "sec", "--from-start"},
			{"reconcile", "--config", cfg, "--state", state, "--source", "sec"},
			{"reconcile", "--config", cfg, "--state", state, "--source", "sec", "--json"},
		} {
			r := bin.Run(t, v.env, args...)
			if testing.Verbose() && args[0] == "run" && len(args) == 6 {
				t.Logf("%s: %s", v.name, strings.TrimSpace(r.Stderr))
			}
			commands++
			printed.WriteString(r.Stdout + r.Stderr)
			if strings.Contains(r.Stdout+r.Stderr, pw) {
				t.Errorf("%s: `syncd %s` printed the password:\n%s", v.name, strings.Join(args[:1], " "), r)
			}
		}
		if b := readBytes(t, state); strings.Contains(string(b), pw) {
			t.Errorf("%s: the state file holds the password", v.name)
		}
	}
	// The failures above did happen (the grep would be vacuous otherwise).
	for _, want := range []string{"127.0.0.1:1", "no-such-host.invalid", "dsn"} {
		if !strings.Contains(printed.String(), want) {
			t.Errorf("no command output mentions %q; the error paths were not exercised", want)
		}
	}
	t.Logf("REPORT secrets: variants=%d commands=%d password_found=0", len(variants), commands)
}

// TestLeastPrivilege syncs with two roles that hold exactly the privileges
// docs/PRIVILEGES.md lists, on a database where PUBLIC holds nothing: a
// source role that can only read the table, and a sink role that can only
// write the copy an administrator created (and, second case, create it).
func TestLeastPrivilege(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	db.Exec(t, `REVOKE ALL ON DATABASE `+db.Name+` FROM PUBLIC`)
	db.Exec(t, `REVOKE ALL ON SCHEMA public FROM PUBLIC`)
	db.Exec(t, `CREATE SCHEMA app`)
	db.Exec(t, `CREATE SCHEMA mirror`)
	db.Exec(t, `CREATE TABLE app.orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text)`)
	db.Exec(t, `CREATE UNIQUE INDEX ON app.orders (updated_at, id)`)
	db.Exec(t, `CREATE TABLE app.secrets (x text)`)
	db.Exec(t, `INSERT INTO app.orders SELECT g, now() - g * interval '1 second', 'n' || g FROM generate_series(1, 3000) g`)
	// With statistics, as autovacuum would give it: on a server running
	// without autovacuum validate would advise this ANALYZE.
	db.Exec(t, `ANALYZE app.orders`)
	db.Exec(t, `CREATE TABLE mirror.orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text)`)

	reader, rpw := newRole(t, db, "syncd_reader")
	writer, wpw := newRole(t, db, "syncd_writer")
	creator, cpw := newRole(t, db, "syncd_creator")
	// Source: CONNECT, USAGE on the schema, SELECT on the table, pg_read_all_stats.
	db.Exec(t, `GRANT CONNECT ON DATABASE `+db.Name+` TO `+reader)
	db.Exec(t, `GRANT USAGE ON SCHEMA app TO `+reader)
	db.Exec(t, `GRANT SELECT ON app.orders TO `+reader)
	// The commit-safe bound reads other roles' transactions in pg_stat_activity.
	db.Exec(t, `GRANT pg_read_all_stats TO `+reader)
	// Sink (copy made by an administrator): CONNECT, TEMPORARY, USAGE on
	// the schema, SELECT/INSERT/UPDATE/DELETE on the copy.
	db.Exec(t, `GRANT CONNECT, TEMPORARY ON DATABASE `+db.Name+` TO `+writer)
	db.Exec(t, `GRANT USAGE ON SCHEMA mirror TO `+writer)
	db.Exec(t, `GRANT SELECT, INSERT, UPDATE, DELETE ON mirror.orders TO `+writer)
	// Sink that creates its copy: CONNECT, TEMPORARY, USAGE and CREATE on the schema.
	db.Exec(t, `GRANT CONNECT, TEMPORARY ON DATABASE `+db.Name+` TO `+creator)
	db.Exec(t, `GRANT USAGE, CREATE ON SCHEMA mirror TO `+creator)
	// syncd's catalog (docs/PRIVILEGES.md): a schema syncd the writer owns,
	// whose tables the second sink role may use too.
	db.Exec(t, `CREATE SCHEMA syncd AUTHORIZATION `+writer)
	db.Exec(t, `GRANT USAGE ON SCHEMA syncd TO `+creator)
	db.Exec(t, `ALTER DEFAULT PRIVILEGES FOR ROLE `+writer+` IN SCHEMA syncd GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO `+creator)

	// The roles really are that narrow.
	for _, c := range []struct{ role, pw, sql string }{
		{reader, rpw, `SELECT count(*) FROM app.secrets`},
		{reader, rpw, `CREATE TEMP TABLE x (i int)`},
		{writer, wpw, `SELECT count(*) FROM app.orders`},
		{writer, wpw, `CREATE TABLE mirror.x (i int)`},
	} {
		conn, err := pgx.Connect(ctx, roleURL(t, db, c.role, c.pw))
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, c.sql)
		conn.Close(ctx)
		if err == nil {
			t.Fatalf("%s could run %q: the role has more than the documented privileges", c.role, c.sql)
		}
	}

	for _, tc := range []struct{ name, sinkRole, sinkPw, table string }{
		{"copy made by an administrator", writer, wpw, "mirror.orders"},
		{"copy made by syncd", creator, cpw, "mirror.orders_created"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeFile(t, dir, "lp.yaml", tableConfig{Name: "lp", SourceDSN: roleURL(t, db, reader, rpw), Table: "app.orders",
				Cursor: "[updated_at, id]", SinkDSN: roleURL(t, db, tc.sinkRole, tc.sinkPw), SinkTable: tc.table, PageSize: 250}.YAML())
			state := filepath.Join(dir, "state.db")
			for _, args := range [][]string{
				{"validate", "--config", cfg},
				{"run", "--once", "--config", cfg, "--state", state},
			} {
				r := bin.Run(t, nil, args...)
				warned := false
				for _, l := range lines(r.Stdout) {
					warned = warned || strings.Contains(l, "warning:") && !strings.Contains(l, "does not exist yet")
				}
				if r.Code != 0 || warned {
					t.Fatalf("%s with least privileges: %s", args[0], r)
				}
			}
			db.Exec(t, `UPDATE app.orders SET updated_at = now(), note = 'again' WHERE id % 4 = 0`)
			if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 {
				t.Fatalf("second run with least privileges: %s", r)
			}
			if missing, extra := diff(t, db, "app.orders", tc.table); missing != 0 || extra != 0 {
				t.Fatalf("copy differs: %d missing, %d extra", missing, extra)
			}
			if r := bin.Run(t, nil, "reconcile", "--config", cfg, "--state", state, "--source", "lp"); r.Code != 0 {
				t.Fatalf("reconcile with least privileges: %s", r)
			}
		})
	}
}

// TestLeastPrivilegeCoupon runs a coupon campaign with a source role that
// can only read the members table and a grants role that holds only the
// grants of docs/PRIVILEGES.md, in separate databases with PUBLIC stripped:
// first with syncd creating its tables, then with tables an administrator
// created. Every target gets exactly one grant.
func TestLeastPrivilegeCoupon(t *testing.T) {
	srcDB, sinkDB := pgtest.NewDB(t), pgtest.NewDB(t)
	for _, db := range []*pgtest.DB{srcDB, sinkDB} {
		db.Exec(t, `REVOKE ALL ON DATABASE `+db.Name+` FROM PUBLIC`)
		db.Exec(t, `REVOKE ALL ON SCHEMA public FROM PUBLIC`)
	}
	want := couponMembers(t, srcDB, 5000)
	reader, rpw := newRole(t, srcDB, "syncd_creader")
	srcDB.Exec(t, `GRANT CONNECT ON DATABASE `+srcDB.Name+` TO `+reader)
	srcDB.Exec(t, `GRANT USAGE ON SCHEMA public TO `+reader)
	srcDB.Exec(t, `GRANT SELECT ON members TO `+reader)
	srcDB.Exec(t, `GRANT pg_read_all_stats TO `+reader)
	creator, cpw := newRole(t, sinkDB, "syncd_cgrant")
	sinkDB.Exec(t, `GRANT CONNECT ON DATABASE `+sinkDB.Name+` TO `+creator)
	sinkDB.Exec(t, `GRANT USAGE, CREATE ON SCHEMA public TO `+creator)
	writer, wpw := newRole(t, sinkDB, "syncd_cwriter")
	sinkDB.Exec(t, `GRANT CONNECT ON DATABASE `+sinkDB.Name+` TO `+writer)
	sinkDB.Exec(t, `GRANT USAGE ON SCHEMA public TO `+writer)

	run := func(t *testing.T, campaign, grantsRole, grantsPw string) {
		t.Helper()
		dir := t.TempDir()
		cfg := writeFile(t, dir, "c.yaml", couponYAML("c", roleURL(t, srcDB, reader, rpw), roleURL(t, sinkDB, grantsRole, grantsPw), campaign, 500))
		state := filepath.Join(dir, "state.db")
		for _, args := range [][]string{
			{"run", "--once", "--config", cfg, "--state", state},
			{"validate", "--config", cfg},
			{"run", "--once", "--config", cfg, "--state", state},
		} {
			if r := bin.Run(t, nil, args...); r.Code != 0 {
				t.Fatalf("%s with least privileges: %s", args[0], r)
			}
		}
		got := column[int64](t, sinkDB, `SELECT member_id FROM coupon_grants WHERE campaign_id = $1 ORDER BY member_id`, campaign)
		if !slices.Equal(got, want) {
			t.Fatalf("%d targets, %d grants", len(want), len(got))
		}
	}
	t.Run("syncd creates the tables", func(t *testing.T) {
		run(t, "lp-created", creator, cpw)
	})
	t.Run("an administrator created the tables", func(t *testing.T) {
		// The administrator reuses the tables syncd made above (the exact
		// DDL is in docs/COUPONS.md) and grants the writer only DML on them.
		sinkDB.Exec(t, `GRANT SELECT, INSERT ON public.coupon_grants, public.coupon_grants_target_chunks TO `+writer)
		sinkDB.Exec(t, `GRANT SELECT, INSERT, UPDATE ON public.syncd_campaigns TO `+writer)
		run(t, "lp-granted", writer, wpw)
	})
}

// A source table whose row-level security applies to the source role: the
// role sees, and syncd copies, only the rows its policy shows, and
// validate says so, naming the role; it does not also advise an ANALYZE
// the role cannot see (pg_stats hides the statistics of such a table from
// it). run --once and reconcile log the same warning. With BYPASSRLS the
// role reads every row and the warning is gone from all three; without
// it again, a repairing reconcile deletes the rows the policy hides.
func TestRowSecurityWarned(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, note text) WITH (autovacuum_enabled = false)`)
	db.Exec(t, `CREATE INDEX ON orders (updated_at, id)`)
	db.Exec(t, `INSERT INTO orders SELECT g, now() - g * interval '1 second', 'n' || g FROM generate_series(1, 3000) g`)
	db.Exec(t, `ANALYZE orders`)
	reader, pw := newRole(t, db, "syncd_rls")
	db.Exec(t, `GRANT SELECT ON orders TO `+reader)
	db.Exec(t, `ALTER TABLE orders ENABLE ROW LEVEL SECURITY`)
	db.Exec(t, `CREATE POLICY even ON orders FOR SELECT USING (id % 2 = 0)`)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "rls.yaml", tableConfig{Name: "rls", SourceDSN: roleURL(t, db, reader, pw), Table: "public.orders",
		Cursor: "[updated_at, id]", SinkDSN: db.URL, SinkTable: "public.orders_copy", PageSize: 500}.YAML())
	warning := `rls: warning: row-level security of public.orders applies to the source role "` + reader + `": syncd copies, and reconcile compares, only the rows its policies show that role`

	r := bin.Run(t, nil, "validate", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, warning) || strings.Contains(r.Stdout, "no planner statistics") {
		t.Fatalf("validate with row-level security on the source: want exit 0 and the row-level security warning only: %s", r)
	}
	// A run that was never validated says it too, naming the role.
	runWarning := "row-level security of public.orders applies to the source role"
	state := filepath.Join(dir, "state.db")
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 ||
		strings.Count(r.Stderr, runWarning) != 1 || !strings.Contains(r.Stderr, reader) {
		t.Fatalf("run --once with row-level security on the source: want exit 0 and the row-level security warning once, naming %s: %s", reader, r)
	}
	// policyView fails the test unless the copy holds exactly the 1500
	// rows the policy shows.
	policyView := func(when string) {
		t.Helper()
		var copied, odd int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE id % 2 = 1) FROM orders_copy`).Scan(&copied, &odd); err != nil {
			t.Fatal(err)
		}
		if copied != 1500 || odd != 0 {
			t.Fatalf("%s the copy holds %d rows, %d of them hidden by the policy; want the 1500 the policy shows", when, copied, odd)
		}
	}
	policyView("after the run")

	// reconcile compares only the rows the policy shows: equal, and said.
	if r := bin.Run(t, nil, "reconcile", "--source", "rls", "--config", cfg, "--state", state); r.Code != 0 ||
		strings.Count(r.Stderr, runWarning) != 1 || !strings.Contains(r.Stderr, reader) {
		t.Fatalf("reconcile with row-level security on the source: want exit 0 and the row-level security warning once, naming %s: %s", reader, r)
	}

	db.Exec(t, `ALTER ROLE `+reader+` BYPASSRLS`)
	if r := bin.Run(t, nil, "validate", "--config", cfg); r.Code != 0 || strings.Contains(r.Stdout, "row-level security") {
		t.Fatalf("validate with a BYPASSRLS source role: want exit 0 and no row-level security warning: %s", r)
	}
	if r := bin.Run(t, nil, "resync", "--config", cfg, "--state", state, "--source", "rls", "--from", "1970-01-01T00:00:00Z"); r.Code != 0 {
		t.Fatalf("resync: %s", r)
	}
	if r := bin.Run(t, nil, "run", "--once", "--config", cfg, "--state", state); r.Code != 0 || strings.Contains(r.Stderr, "row-level security") {
		t.Fatalf("run --once after BYPASSRLS: want exit 0 and no row-level security warning: %s", r)
	}
	if r := bin.Run(t, nil, "reconcile", "--source", "rls", "--config", cfg, "--state", state); r.Code != 0 || strings.Contains(r.Stderr, "row-level security") {
		t.Fatalf("reconcile after BYPASSRLS: want exit 0 and no row-level security warning: %s", r)
	}
	if missing, extra := diff(t, db, "orders", "orders_copy"); missing != 0 || extra != 0 {
		t.Fatalf("with BYPASSRLS the copy differs from the table: %d missing, %d extra", missing, extra)
	}

	// The policy applies again: reconcile finds the rows it hides extra in
	// the copy, and a repair deletes them (the copy is the role's view).
	db.Exec(t, `ALTER ROLE `+reader+` NOBYPASSRLS`)
	if r := bin.Run(t, nil, "reconcile", "--source", "rls", "--config", cfg, "--state", state); r.Code != 1 ||
		!strings.Contains(r.Stderr, "0 missing, 1500 extra, 0 changed") || strings.Count(r.Stderr, runWarning) != 1 {
		t.Fatalf("reconcile once the policy applies again: want exit 1, 1500 extra rows and the warning: %s", r)
	}
	if r := bin.Run(t, nil, "reconcile", "--source", "rls", "--repair", "--config", cfg, "--state", state); r.Code != 0 {
		t.Fatalf("reconcile --repair once the policy applies again: %s", r)
	}
	policyView("after the repair")
}
