package redislock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// squeeze drops every blank, so that SQL compares whatever its line breaks and indents.
func squeeze(s string) string { return strings.Join(strings.Fields(s), "") }

// named is query with its placeholders named as docs/fencing.md names them: the fence's name,
// then its token ($1, $2 on PostgreSQL, ? ? elsewhere; a read back takes the name alone).
func named(query string) string {
	query = strings.NewReplacer("$1", ":name", "$2", ":token").Replace(query)
	for _, name := range []string{":name", ":token"} {
		query = strings.Replace(query, "?", name, 1)
	}
	return query
}

// Rule 13: the statements are docs/fencing.md's, on the default table and on another one
// (schema-qualified too, in each place the table is named).
func TestTheFenceStatementsAreTheDocs(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "fencing.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := squeeze(string(docs))
	for _, d := range []Dialect{Postgres, MySQL, SQLite} {
		upsert, readBack := d.fenceSQL(defaultFenceTable)
		statements := []string{d.createSQL(defaultFenceTable), upsert}
		if d == MySQL {
			if readBack == "" {
				t.Fatal("MySQL reads the stored token back")
			}
			statements = append(statements, readBack)
		} else if readBack != "" {
			t.Fatalf("%v: a read back %q; its row count says it all", d, readBack)
		}
		for _, stmt := range statements {
			if !strings.Contains(page, squeeze(named(stmt))) {
				t.Errorf("%v: %q is not a statement of docs/fencing.md", d, stmt)
			}
		}

		upsert, readBack = d.fenceSQL("app.fences")
		for _, stmt := range []string{d.createSQL("app.fences"), upsert, readBack} {
			if strings.Contains(stmt, defaultFenceTable) {
				t.Errorf("%v: %q still names lock_fences", d, stmt)
			}
		}
		if want := map[Dialect]int{Postgres: 2, SQLite: 2, MySQL: 1}[d]; strings.Count(upsert, "app.fences") != want {
			t.Errorf("%v: %q names the table %d times, want %d", d, upsert, strings.Count(upsert, "app.fences"), want)
		}
	}
	if upsert, _ := Dialect(0).fenceSQL("t"); upsert != "" || Dialect(0).createSQL("t") != "" || Dialect(0).valid() {
		t.Error("the zero Dialect has statements")
	}
}
