package jobconfig

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactFields(t *testing.T) {
	in := map[string]string{
		FieldHTTPHeaders: "Authorization: Bearer s3cr3t-token\nX-Api-Key: k-123456\nX-Ref: Bearer ${env:SHARDFLOW_SECRET_T}\nX-File: ${file:api-key}\nnot a header",
		FieldHTTPURL:     "https://user:pw-9876@jobs.internal/run?api_key=q-secret&region=eu",
		FieldCron:        "0/5 * * * * ?",
	}
	got := RedactFields(in)
	wantHeaders := "Authorization: REDACTED\nX-Api-Key: REDACTED\nX-Ref: Bearer ${env:SHARDFLOW_SECRET_T}\nX-File: ${file:api-key}\nREDACTED"
	if got[FieldHTTPHeaders] != wantHeaders {
		t.Errorf("headers = %q, want %q", got[FieldHTTPHeaders], wantHeaders)
	}
	if u := got[FieldHTTPURL]; u != "https://user:REDACTED@jobs.internal/run?api_key=REDACTED&region=REDACTED" {
		t.Errorf("url = %q", u)
	}
	if got[FieldCron] != in[FieldCron] {
		t.Errorf("cron changed: %q", got[FieldCron])
	}
	if strings.Contains(in[FieldHTTPHeaders], "REDACTED") {
		t.Error("RedactFields changed its input")
	}
	if !IsSecretField(FieldHTTPHeaders) || !IsSecretField(FieldHTTPURL) || IsSecretField(FieldJobParameter) {
		t.Error("IsSecretField marks the wrong fields")
	}
}

// TestValidationErrorsHideSecrets: a header line without a name (a token
// pasted alone) and a URL that does not validate are refused without
// quoting the secret.
func TestValidationErrorsHideSecrets(t *testing.T) {
	_, err := ParseHTTPHeaders("Bearer-only-s3cr3t-token")
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("ParseHTTPHeaders error %v quotes the secret", err)
	}
	err = ValidateHTTPURL("ftp://jobs.internal/run?api_key=q-secret")
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "q-secret") {
		t.Errorf("ValidateHTTPURL error %v quotes the secret", err)
	}
}

func TestReplaceSecretRefs(t *testing.T) {
	got, err := ReplaceSecretRefs("Bearer ${env:SHARDFLOW_SECRET_T} ${file:k}", func(kind, name string) (string, error) {
		return kind + "/" + name, nil
	})
	if err != nil || got != "Bearer env/SHARDFLOW_SECRET_T file/k" {
		t.Errorf("ReplaceSecretRefs = %q, %v", got, err)
	}
	if refs := SecretRefs("a ${env:X} ${file:y.txt} ${other:z}"); len(refs) != 2 || refs[1] != [2]string{"file", "y.txt"} {
		t.Errorf("SecretRefs = %v", refs)
	}
}
