package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// checkType matches the selected columns against T without reading a row:
// every column has a field (pgx.RowToStructByName's rules), and every
// field's Go type can be scanned from its column's SQL type, as pgx will
// plan the scan at Fetch time.
func (s *Source[T]) checkType(ctx context.Context, info *tableInfo) error {
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("sources/postgres: checking the columns of table %s: %w", s.spec.Table, err)
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, "SELECT "+selectList(s.cols, "")+" FROM "+s.spec.ident().Sanitize()+" LIMIT 0")
	if err != nil {
		return fmt.Errorf("sources/postgres: selecting the columns of table %s: %w", s.spec.Table, err)
	}
	fds := append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
	rows.Close()
	var zero T
	probe := &planRow{fds: fds, types: conn.Conn().TypeMap()}
	v, err := pgx.RowToAddrOfStructByName[T](probe)
	if err != nil && !errors.Is(err, errPlanMismatch) {
		return fmt.Errorf("%w: table %s columns %v into %T: %w (add the field, tag it `db:\"column\"`, or list the columns in TableSpec.Columns)",
			ErrRowMismatch, s.spec.Table, s.cols, zero, err)
	}
	if len(probe.bad) == 0 {
		paths := fieldPaths(v)
		s.fields = make([][]int, len(probe.dest))
		for i, d := range probe.dest {
			path, ok := paths[reflect.ValueOf(d).Pointer()]
			if !ok {
				return fmt.Errorf("%w: table %s into %T: no field of T found for column %q", ErrRowMismatch, s.spec.Table, zero, fds[i].Name)
			}
			s.fields[i] = path
		}
		s.warnNullable(info, fds, probe)
		return nil
	}
	names := fieldNames(v)
	var msgs []string
	for _, i := range probe.bad {
		col := fds[i].Name
		field := names[reflect.ValueOf(probe.dest[i]).Pointer()]
		if field == "" {
			field = "?"
		}
		msgs = append(msgs, fmt.Sprintf("field %s (Go type %s) cannot hold column %q (SQL type %s)",
			field, reflect.TypeOf(probe.dest[i]).Elem(), col, info.cols[col].typ))
	}
	return fmt.Errorf("%w: table %s into %T: %s; change the field's Go type to one pgx scans that SQL type into (e.g. int64 for bigint, time.Time for timestamptz, a pointer for a nullable column), or cast the column in a view",
		ErrRowMismatch, s.spec.Table, zero, strings.Join(msgs, "; "))
}

var errPlanMismatch = errors.New("type mismatch")

// planRow is a row without values: its Scan asks pgx's type map for a scan
// plan of every column into its destination field and records the ones
// without a plan.
type planRow struct {
	fds   []pgconn.FieldDescription
	types *pgtype.Map
	dest  []any
	bad   []int
}

func (r *planRow) FieldDescriptions() []pgconn.FieldDescription { return r.fds }
func (r *planRow) Values() ([]any, error)                       { return nil, nil }
func (r *planRow) RawValues() [][]byte                          { return nil }

func (r *planRow) Scan(dest ...any) error {
	r.dest = dest
	for i, d := range dest {
		oid := r.fds[i].DataTypeOID
		plan := r.types.PlanScan(oid, r.types.FormatCodeForOID(oid), d)
		// pgtype returns its unexported scanPlanFail when no plan exists:
		// the scan of every non-NULL value would fail.
		if plan == nil || reflect.TypeOf(plan).String() == "*pgtype.scanPlanFail" {
			r.bad = append(r.bad, i)
		}
	}
	if len(r.bad) > 0 {
		return errPlanMismatch
	}
	return nil
}

// fieldPaths maps the address of every field of *v (embedded structs
// flattened) to its index path.
func fieldPaths(v any) map[uintptr][]int {
	out := map[uintptr][]int{}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() != reflect.Pointer || rv.IsNil() {
		return out
	}
	var walk func(reflect.Value, []int)
	walk = func(sv reflect.Value, prefix []int) {
		for i := 0; i < sv.NumField(); i++ {
			f, sf := sv.Field(i), sv.Type().Field(i)
			path := append(append([]int(nil), prefix...), i)
			if sf.Anonymous && f.Kind() == reflect.Struct {
				walk(f, path)
				continue
			}
			if f.CanAddr() {
				out[f.Addr().Pointer()] = path
			}
		}
	}
	walk(rv.Elem(), nil)
	return out
}

// fieldNames maps the address of every field of *v (embedded structs
// flattened) to its name, Type.Field.
func fieldNames(v any) map[uintptr]string {
	out := map[uintptr]string{}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() != reflect.Pointer || rv.IsNil() {
		return out
	}
	var walk func(reflect.Value, string)
	walk = func(sv reflect.Value, prefix string) {
		for i := 0; i < sv.NumField(); i++ {
			f, sf := sv.Field(i), sv.Type().Field(i)
			name := prefix + "." + sf.Name
			if sf.Anonymous && f.Kind() == reflect.Struct {
				walk(f, name)
				continue
			}
			if f.CanAddr() {
				out[f.Addr().Pointer()] = name
			}
		}
	}
	walk(rv.Elem(), rv.Elem().Type().Name())
	return out
}

// warnNullable logs one warning per nullable column whose field cannot
// hold NULL (pgx refuses to scan NULL into it): a NULL there will make its
// row unreadable, and the row will be set aside (ReadError).
//
// A warning, not a refusal: Postgres columns are nullable unless declared
// NOT NULL, and many tables never hold a NULL in columns their schema
// leaves nullable. Refusing them would force a schema change or pointer
// fields on every such table before the first run, while a NULL that does
// appear costs its own row only: set aside with the column named, the
// rest of the item going on.
func (s *Source[T]) warnNullable(info *tableInfo, fds []pgconn.FieldDescription, probe *planRow) {
	s.nullRisks = nil
	for i, d := range probe.dest {
		col := fds[i].Name
		if c, ok := info.cols[col]; !ok || c.notNull {
			continue
		}
		typ := reflect.TypeOf(d).Elem()
		oid := fds[i].DataTypeOID
		if err := probe.types.Scan(oid, probe.types.FormatCodeForOID(oid), nil, reflect.New(typ).Interface()); err == nil {
			continue
		}
		var zero T
		field := fieldName(reflect.TypeOf(zero), s.fields[i])
		s.nullRisks = append(s.nullRisks, col)
		s.cfg.Logger.Warn("sources/postgres: a nullable column maps to a field that cannot hold NULL; a row with NULL there will be set aside as failed (declare the column NOT NULL, or make the field a pointer or sql.Null type)",
			"table", s.spec.Table, "column", col, "field", field, "go_type", typ.String())
	}
}
