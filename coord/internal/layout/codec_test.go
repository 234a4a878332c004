package layout

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardflow/shardflow/coord/store"
)

func TestItemsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"", nil, false},
		{"0,1,2", []int{0, 1, 2}, false},
		{" 2, 0 ,1,1", []int{0, 1, 2}, false},
		{"0,,1", nil, true},
		{"-1", nil, true},
		{"a", nil, true},
	} {
		got, err := ParseItems([]byte(tc.in))
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("parseItems(%q) = %v, %v; want %v, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
		if err == nil {
			back, _ := ParseItems(FormatItems(got))
			if !slices.Equal(back, got) {
				t.Errorf("round trip of %v gave %v", got, back)
			}
		}
	}
}

func TestTimeRoundTrip(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	got, err := ParseTime(FormatTime(now))
	if err != nil || !got.Equal(now) {
		t.Fatalf("parseTime(formatTime(%v)) = %v, %v", now, got, err)
	}
	if _, err := ParseTime([]byte("yesterday")); err == nil {
		t.Fatal("parseTime accepted text")
	}
}

// FuzzDecode feeds arbitrary node data to every decoder of node data: none
// may panic, and whatever decodes must encode back to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "0,1,2", "1700000000000", "true", "false", " 3 ,1", "-5", "9999999999999999999999", "0,a", "\x00", "2,2,2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if items, err := ParseItems(data); err == nil {
			back, err := ParseItems(FormatItems(items))
			if err != nil || !slices.Equal(back, items) {
				t.Fatalf("items %v do not round-trip: %v, %v", items, back, err)
			}
			if !slices.IsSorted(items) {
				t.Fatalf("items %v not sorted", items)
			}
		}
		if tm, err := ParseTime(data); err == nil {
			back, err := ParseTime(FormatTime(tm))
			if err != nil || !back.Equal(tm) {
				t.Fatalf("time %v does not round-trip: %v, %v", tm, back, err)
			}
		}
		_, _ = ParseCount(data)
		_ = FlagTrue(data)
		_, _ = ParseItemName(string(data))
	})
}

// TestSessionProblemNeverContradicts: a connected store session that
// replaced the registered one is described as a replacement, never as
// "connected ... lost" (issue 11).
func TestSessionProblemNeverContradicts(t *testing.T) {
	for _, tc := range []struct {
		sess store.Session
		reg  int64
		want string
	}{
		{store.Session{ID: 2, State: store.StateConnected}, 1, "re-registering on new session 0x2"},
		{store.Session{ID: 1, State: store.StateSuspended}, 1, "is suspended"},
		{store.Session{ID: 1, State: store.StateLost}, 1, "is lost"},
	} {
		got := SessionProblem(tc.sess, tc.reg)
		if !strings.Contains(got, tc.want) || strings.Contains(got, "connected") {
			t.Errorf("sessionProblem(%+v, %d) = %q, want it to say %q and not 'connected'", tc.sess, tc.reg, got, tc.want)
		}
	}
}

// TestParseDigitItems: ParseItems' fast path for plain digits decodes what
// the general parser does, or leaves the text to it. The seed is printed;
// SHARDFLOW_ITEMS_SEED replays it.
func TestParseDigitItems(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("SHARDFLOW_ITEMS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (SHARDFLOW_ITEMS_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	texts := []string{"", " ", "0", "7", "3,1,2", " 2, 0 ,1,1", "1,", ",1", ",", "0,,1", "+1", "-0", "1 2", "12345678901234567", "123456789012345678", "01,1", "\t4\n"}
	const alphabet = "0123456789 ,,-+a\t"
	for range 5000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		texts = append(texts, string(b))
	}
	for _, s := range texts {
		want, werr := parseItemsText([]byte(s))
		got, ok := parseDigitItems([]byte(s))
		if ok && (werr != nil || !slices.Equal(got, want)) {
			t.Errorf("parseDigitItems(%q) = %v; the general parser: %v, %v", s, got, want, werr)
		}
		if all, err := ParseItems([]byte(s)); (err != nil) != (werr != nil) || !slices.Equal(all, want) {
			t.Errorf("ParseItems(%q) = %v, %v; want %v, %v", s, all, err, want, werr)
		}
	}
	plain := []byte("0,3,7")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseItems(plain) }); n > 1 {
		t.Errorf("ParseItems of plain digits: %v allocations, want 1", n)
	}
}
