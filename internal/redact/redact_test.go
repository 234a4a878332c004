package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://h/p?api_key=abc&x=1":                 "https://h/p?api_key=REDACTED&x=REDACTED",
		"https://u:pw@h/p":                            "https://u:REDACTED@h/p",
		"https://h/p":                                 "https://h/p",
		"postgres://app:pw@db:5432/x?sslmode=require": "postgres://app:REDACTED@db:5432/x?sslmode=REDACTED",
		"https://h/p#tok":                             "https://h/p#REDACTED",
		"::bad?secret=1":                              "::bad?REDACTED",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	in := `Post "https://h/run?api_key=k-111": dial tcp: refused; body tail: "host=db user=app password=pw-222 dbname=x" ` +
		`{"token": "t-333"} Authorization: Bearer b-444 and known-555`
	got := Text(in, "known-555")
	for _, s := range []string{"k-111", "pw-222", "t-333", "b-444", "known-555"} {
		if strings.Contains(got, s) {
			t.Errorf("Text kept %q: %s", s, got)
		}
	}
	if !strings.Contains(got, "https://h/run?api_key=REDACTED") || !strings.Contains(got, "dial tcp: refused") {
		t.Errorf("Text lost the useful part: %s", got)
	}
	if Text("ok", "ab") != "ok" {
		t.Error("short values must be ignored")
	}
}
