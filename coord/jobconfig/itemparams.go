package jobconfig

import (
	"strconv"
	"strings"
)

const itemParamsFix = `write comma-separated item=value pairs with items 0..shardingTotalCount-1, e.g. "0=Beijing,1=Shanghai,2=Guangzhou"`

// ParseItemParameters parses a shardingItemParameters string such as
// "0=Beijing,1=Shanghai" into item -> parameter.
//
// The string is split on ',' and each pair on '='; keys and values are
// trimmed of spaces. An empty string, and empty pairs (",," or a trailing
// comma), give no entries. An empty value ("1=") is allowed. A pair that is
// not exactly two parts ("0=a=b", "x"), a key that is not an integer
// ("x=1", "=a"), a negative key, a key >= total (when total > 0; total <= 0
// skips that check) and a repeated key are errors that wrap ErrInvalid and
// name the shardingItemParameters field. The result is never nil on success.
func ParseItemParameters(s string, total int) (map[int]string, error) {
	const field = FieldShardingItemParameters
	out := make(map[int]string)
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return nil, fieldErr(field, itemParamsFix, "pair %q must be exactly item=value", pair)
		}
		key, value := strings.TrimSpace(kv[0]), strings.TrimSpace(kv[1])
		item, err := strconv.Atoi(key)
		if err != nil {
			return nil, fieldErr(field, itemParamsFix, "pair %q: item %q is not an integer", pair, key)
		}
		if item < 0 {
			return nil, fieldErr(field, itemParamsFix, "pair %q: item %d is negative", pair, item)
		}
		if total > 0 && item >= total {
			return nil, fieldErr(field, itemParamsFix+", or raise shardingTotalCount",
				"pair %q: item %d is not below shardingTotalCount %d", pair, item, total)
		}
		if _, dup := out[item]; dup {
			return nil, fieldErr(field, itemParamsFix, "item %d appears more than once", item)
		}
		out[item] = value
	}
	return out, nil
}
