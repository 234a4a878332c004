package quartz

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The fields, in the order they are written.
const (
	second = iota
	minute
	hour
	dayOfMonth
	month
	dayOfWeek
	year
)

var fieldNames = [...]string{"second", "minute", "hour", "day-of-month", "month", "day-of-week", "year"}

// Markers Quartz stores in a field's set: "*" and "?".
const (
	allSpec = 99
	noSpec  = 98
)

// maxYear is the last year Quartz searches: the year it was loaded plus 100.
var maxYear = time.Now().Year() + 100

var monthNames = map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6, "JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}
var dayNames = map[string]int{"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}

// Expression is a parsed Quartz cron expression, independent of time zone.
type Expression struct {
	text string
	sets [7]intSet

	lastDayOfWeek  bool // "nL" in day-of-week
	nthDayOfWeek   int  // "n#k": k, else 0
	lastDayOfMonth bool // "L", "L-n", "LW" in day-of-month
	nearestWeekday bool // "W"
	lastDayOffset  int  // "L-n": n
}

// String returns the expression as given.
func (e *Expression) String() string { return e.text }

// parser holds the expression being built and the field being read.
type parser struct {
	e     *Expression
	field int
	value string
}

func (p *parser) errf(format string, args ...any) error {
	return &SyntaxError{Expr: p.e.text, Field: fieldNames[p.field], Value: p.value, Problem: fmt.Sprintf(format, args...)}
}

// ParseExpression reads expr as Quartz's CronExpression constructor does,
// refusing what it refuses, plus fields that select no value and non-ASCII
// bytes. Errors are *SyntaxError.
//
// An Expression is immutable once parsed, so the same text returns the same
// one (up to parsedMax texts are kept): thousands of jobs on one schedule
// share one set of value lists instead of holding 2-3 KB each.
func ParseExpression(expr string) (*Expression, error) {
	parsedMu.Lock()
	e, ok := parsed[expr]
	parsedMu.Unlock()
	if ok {
		return e, nil
	}
	e, err := parseExpression(expr)
	if err != nil {
		return nil, err
	}
	parsedMu.Lock()
	if len(parsed) < parsedMax {
		parsed[expr] = e
	}
	parsedMu.Unlock()
	return e, nil
}

// parsedMax bounds the expressions ParseExpression keeps.
const parsedMax = 1024

var (
	parsedMu sync.Mutex
	parsed   = make(map[string]*Expression)
)

func parseExpression(expr string) (*Expression, error) {
	e := &Expression{text: expr}
	for i := 0; i < len(expr); i++ {
		if expr[i] >= 0x80 {
			return nil, &SyntaxError{Expr: expr, Problem: fmt.Sprintf("byte %d is not ASCII", i)}
		}
	}
	up := strings.ToUpper(expr)
	tokens := strings.FieldsFunc(up, func(r rune) bool { return r == ' ' || r == '\t' })
	n := 0
	for _, tok := range tokens {
		if n > year {
			break // Quartz ignores fields after the year
		}
		tok = strings.TrimFunc(tok, func(r rune) bool { return r <= ' ' })
		p := &parser{e: e, field: n, value: tok}
		if err := p.fieldChecks(); err != nil {
			return nil, err
		}
		for _, part := range strings.Split(tok, ",") {
			if part == "" {
				continue
			}
			p.value = part
			if err := p.parseValue(part); err != nil {
				return nil, err
			}
		}
		n++
	}
	if n <= dayOfWeek {
		return nil, &SyntaxError{Expr: expr, Problem: fmt.Sprintf("%d fields, want 6 (second minute hour day-of-month month day-of-week) or 7 (and year)", n)}
	}
	if n == year {
		p := &parser{e: e, field: year, value: "*"}
		if err := p.addRange(allSpec, -1, 0); err != nil {
			return nil, err
		}
	}
	domAny, dowAny := e.sets[dayOfMonth].has(noSpec), e.sets[dayOfWeek].has(noSpec)
	if domAny == dowAny {
		what := "both day-of-month and day-of-week are set"
		if domAny {
			what = "both day-of-month and day-of-week are \"?\""
		}
		return nil, &SyntaxError{Expr: expr, Problem: what + `: write "?" in exactly one of them, e.g. "0 0 12 ? * MON" or "0 0 12 1 * ?"`}
	}
	for f := second; f <= dayOfWeek; f++ {
		if f == dayOfMonth || (f == dayOfWeek && dowAny) {
			continue // day-of-month: never empty unless "L", which needs no set
		}
		if len(e.sets[f]) == 0 {
			return nil, &SyntaxError{Expr: expr, Field: fieldNames[f], Value: tokenOf(tokens, f), Problem: "selects no value"}
		}
	}
	return e, nil
}

func tokenOf(tokens []string, f int) string {
	if f < len(tokens) {
		return tokens[f]
	}
	return ""
}

// fieldChecks are Quartz's checks on a whole field before its values.
func (p *parser) fieldChecks() error {
	v := p.value
	switch {
	case p.field == dayOfMonth && strings.Contains(v, "L") && len(v) > 1 && strings.Contains(v, ","):
		return p.errf(`"L" and "LW" cannot be listed with other days`)
	case p.field == dayOfWeek && strings.Contains(v, "L") && len(v) > 1 && strings.Contains(v, ","):
		return p.errf(`"L" cannot be listed with other days`)
	case p.field == dayOfWeek && strings.Count(v, "#") > 1:
		return p.errf(`only one "#" (nth day of the month) is allowed`)
	}
	return nil
}

// isLastOffset reports whether s is "L-" digits, optionally "W".
func isLastOffset(s string) bool {
	if !strings.HasPrefix(s, "L-") {
		return false
	}
	rest := strings.TrimSuffix(s[2:], "W")
	return strings.Trim(rest, "0123456789") == ""
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseValue reads one comma-separated part of a field.
func (p *parser) parseValue(s string) error {
	c := s[0]
	switch {
	case 'A' <= c && c <= 'Z' && s != "L" && s != "LW" && !isLastOffset(s):
		return p.parseName(s)
	case c == '?':
		return p.parseAny(s)
	case c == '*' || c == '/':
		return p.parseAll(s)
	case c == 'L':
		return p.parseLast(s)
	case isDigit(c):
		val, i := int(c-'0'), 1
		if len(s) == 1 {
			return p.addRange(val, -1, -1)
		}
		if isDigit(s[1]) {
			var err error
			if val, i, err = p.digits(s, 0); err != nil {
				return err
			}
		}
		return p.afterNumber(s, i, val)
	}
	return p.errf("unexpected character %q", c)
}

// parseName reads a month or day name, with "-NAME", "#k" or "L" after
// it; anything else after the name (a step "/2" among it) is ignored.
func (p *parser) parseName(s string) error {
	if p.field != month && p.field != dayOfWeek {
		return p.errf("letters are not allowed in the %s field", fieldNames[p.field])
	}
	names, kind := monthNames, "month (JAN-DEC)"
	if p.field == dayOfWeek {
		names, kind = dayNames, "day of week (SUN-SAT)"
	}
	if len(s) < 3 {
		return p.errf("%q is not a %s", s, kind)
	}
	start, ok := names[s[:3]]
	if !ok {
		return p.errf("%q is not a %s", s[:3], kind)
	}
	end, incr := -1, 0
	if len(s) > 3 {
		switch s[3] {
		case '-':
			if len(s) < 7 {
				return p.errf("%q after '-' is not a %s", s[4:], kind)
			}
			if end, ok = names[s[4:7]]; !ok {
				return p.errf("%q is not a %s", s[4:7], kind)
			}
			incr = 1
		case '#':
			if p.field == dayOfWeek {
				if err := p.nth(s[4:]); err != nil {
					return err
				}
			}
		case 'L':
			if p.field == dayOfWeek {
				p.e.lastDayOfWeek = true
			}
		}
	}
	return p.addRange(start, end, incr)
}

// nth reads k of "n#k": Java's Integer.parseInt of the rest, 1 to 5.
func (p *parser) nth(rest string) error {
	k, err := javaParseInt(rest)
	if err != nil || k < 1 || k > 5 {
		return p.errf(`"#" must be followed by a number 1-5 (the week of the month), got %q`, rest)
	}
	p.e.nthDayOfWeek = k
	return nil
}

// parseAny reads "?". Quartz ignores one character after it.
func (p *parser) parseAny(s string) error {
	if len(s) > 2 {
		return p.errf(`unexpected characters after "?"`)
	}
	if p.field != dayOfMonth && p.field != dayOfWeek {
		return p.errf(`"?" is only allowed in day-of-month or day-of-week`)
	}
	if p.field == dayOfWeek && !p.e.lastDayOfMonth {
		dom := p.e.sets[dayOfMonth]
		if len(dom) == 0 {
			return p.errf(`"?" needs a day-of-month value`)
		}
		if dom[len(dom)-1] == noSpec {
			return p.errf(`"?" in both day fields: set day-of-month or day-of-week`)
		}
	}
	return p.addRange(noSpec, -1, 0)
}

// parseAll reads "*", "*/n" and "/n".
func (p *parser) parseAll(s string) error {
	if s == "*" {
		return p.addRange(allSpec, -1, 0)
	}
	if s == "/" {
		return p.errf(`"/" must be followed by a step`)
	}
	i := 0
	if s[0] == '*' {
		i = 1
	}
	if s[i] != '/' {
		return p.addRange(allSpec, -1, 1) // "*" followed by anything else is "*"
	}
	i++
	if i >= len(s) {
		return p.errf(`"/" must be followed by a step`)
	}
	incr, err := javaParseInt(s[i:])
	if err != nil {
		return p.errf("step %q is not a number", s[i:])
	}
	if err := p.checkStep(incr); err != nil {
		return err
	}
	return p.addRange(allSpec, -1, incr)
}

// parseLast reads "L", "LW", "L-n" and "L-nW".
func (p *parser) parseLast(s string) error {
	switch p.field {
	case dayOfWeek:
		return p.addRange(7, 7, 0) // "L" alone is Saturday
	case dayOfMonth:
	default:
		return nil // Quartz adds nothing: the field may end up empty
	}
	p.e.lastDayOfMonth = true
	i := 1
	if len(s) > 1 && s[1] == '-' {
		if len(s) == 2 {
			return p.errf(`"L-" must be followed by a number of days`)
		}
		off, next, err := p.digits(s, 2)
		if err != nil {
			return err
		}
		if off > 30 {
			return p.errf("the offset from the last day must be at most 30, got %d", off)
		}
		p.e.lastDayOffset, i = off, next
	}
	if i < len(s) && s[i] == 'W' {
		p.e.nearestWeekday = true
	}
	return nil
}

// digits reads the number starting at s[from], as Quartz's getValue, and
// returns it with the index after its digits. Quartz reads no digits as 0.
func (p *parser) digits(s string, from int) (val, next int, err error) {
	j := from
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	text := s[from:j]
	if text == "" {
		text = "0" // "L-W": Quartz reads no digits as 0
	}
	n, perr := strconv.ParseInt(text, 10, 32)
	if perr != nil {
		return 0, 0, p.errf("%q is too large", text)
	}
	return int(n), j, nil
}

// afterNumber reads what follows a number: "L", "W", "#k", "-end[/step]",
// "/step", or nothing Quartz looks at.
func (p *parser) afterNumber(s string, i, val int) error {
	if i >= len(s) {
		return p.addRange(val, -1, -1)
	}
	switch s[i] {
	case 'L':
		if p.field != dayOfWeek {
			return p.errf(`"L" after a number is only allowed in day-of-week ("6L": the last Friday)`)
		}
		if val < 1 || val > 7 {
			return p.errf("day-of-week values must be 1-7 (1=SUN..7=SAT), got %d", val)
		}
		p.e.lastDayOfWeek = true
		p.e.sets[p.field].add(val)
		return nil
	case 'W':
		if p.field != dayOfMonth {
			return p.errf(`"W" is only allowed in day-of-month ("15W": the weekday nearest the 15th)`)
		}
		if val > 31 {
			return p.errf(`"W" needs a day 1-31, got %d`, val)
		}
		p.e.nearestWeekday = true
		p.e.sets[p.field].add(val)
		return nil
	case '#':
		if p.field != dayOfWeek {
			return p.errf(`"#" is only allowed in day-of-week ("6#3": the third Friday)`)
		}
		if err := p.nth(s[i+1:]); err != nil {
			return err
		}
		p.e.sets[p.field].add(val)
		return nil
	case '-':
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return p.errf(`"-" must be followed by the end of the range`)
		}
		end := int(s[i] - '0')
		i++
		if i >= len(s) {
			return p.addRange(val, end, 1)
		}
		if isDigit(s[i]) {
			var err error
			if end, i, err = p.digits(s, i-1); err != nil {
				return err
			}
		}
		if i >= len(s) || s[i] != '/' {
			return p.addRange(val, end, 1)
		}
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return p.errf(`"/" must be followed by a step`)
		}
		step, _, err := p.digits(s, i)
		if err != nil {
			return err
		}
		return p.addRange(val, end, step) // Quartz does not check range steps
	case '/':
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return p.errf(`"/" must be followed by a step`)
		}
		step, next, err := p.digits(s, i)
		if err != nil {
			return err
		}
		if next == i+1 && next < len(s) {
			// Quartz refuses a character right after a one-digit step, and
			// ignores one after a longer step.
			return p.errf("unexpected character %q after the step", s[next])
		}
		if err := p.checkStep(step); err != nil {
			return err
		}
		return p.addRange(val, -1, step)
	}
	return p.addRange(val, -1, 0) // Quartz ignores the rest
}

// checkStep refuses a step larger than the field, as Quartz 2.3 does.
func (p *parser) checkStep(incr int) error {
	limit := map[int]int{second: 59, minute: 59, hour: 23, dayOfMonth: 31, dayOfWeek: 7, month: 12}
	if max, ok := limit[p.field]; ok && incr > max {
		return p.errf("step %d is larger than the field: at most %d", incr, max)
	}
	return nil
}

// bounds are each field's values, and the modulus of its wrapping ranges.
var bounds = [...]struct{ min, max, wrap int }{
	second: {0, 59, 60}, minute: {0, 59, 60}, hour: {0, 23, 24},
	dayOfMonth: {1, 31, 31}, month: {1, 12, 12}, dayOfWeek: {1, 7, 7}, year: {1970, 0, 0},
}

// addRange is Quartz's addToSet: a single value when incr is 0 or -1,
// else start..end by incr, wrapping when end < start; allSpec as start
// means the field's whole range, and end -1 its maximum.
func (p *parser) addRange(val, end, incr int) error {
	f, set := p.field, &p.e.sets[p.field]
	b := bounds[f]
	switch f {
	case second, minute, hour, month:
		if (val < b.min || val > b.max || end > b.max) && val != allSpec {
			return p.errf("values must be %d-%d", b.min, b.max)
		}
	case dayOfMonth:
		if (val < 1 || val > 31 || end > 31) && val != allSpec && val != noSpec {
			return p.errf("values must be 1-31")
		}
	case dayOfWeek:
		if (val == 0 || val > 7 || end > 7) && val != allSpec && val != noSpec {
			return p.errf("values must be 1-7 (1=SUN..7=SAT) or SUN-SAT")
		}
	}
	if (incr == 0 || incr == -1) && val != allSpec {
		set.add(val)
		return nil
	}
	start, stop := val, end
	if val == allSpec && incr <= 0 {
		incr = 1
		set.add(allSpec)
	}
	max := b.max
	if f == year {
		max = maxYear
	}
	if stop == -1 {
		stop = max
	}
	if start == -1 || start == allSpec {
		start = b.min
	}
	wrap := 0
	if stop < start {
		if f == year {
			return p.errf("the range ends before it starts: years do not wrap")
		}
		wrap = b.wrap
		stop += wrap
	}
	if f == year && stop > maxYear {
		stop = maxYear // later years can never fire: Quartz stops at maxYear
	}
	for i := start; i <= stop; i += incr {
		v := i
		if wrap != 0 {
			v = i % wrap
			if v == 0 && (f == month || f == dayOfWeek || f == dayOfMonth) {
				v = wrap
			}
		}
		set.add(v)
	}
	return nil
}

// javaParseInt is Java's Integer.parseInt on ASCII text.
func javaParseInt(s string) (int, error) {
	if s == "" || s == "+" || s == "-" {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseInt(s, 10, 32) // accepts the sign, as Java does
	return int(n), err
}
