package config

import (
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/capturegate/gate/internal/limit"
)

// The field types of this package are envconfig Decoders; keyFrom, cost, eventTimeFrom,
// clockSetting and limit.Mode are read by their packages' UnmarshalText, which
// envconfig.Process calls as well.
var _ = []envconfig.Decoder{
	(*overrideList)(nil), (*limitList)(nil), (*brokerList)(nil), (*startOffset)(nil),
	(*delivery)(nil), (*onUndeliverable)(nil), (*onDataLoss)(nil), (*teamList)(nil),
	(*saslMechanism)(nil), (*redisMode)(nil), (*sentinelAddrs)(nil), (*sentinelMaster)(nil),
	(*redisURLs)(nil), (*logLevel)(nil), (*logFormat)(nil),
}

// wanter is a field type that says what a valid value looks like. Its parse errors are
// shown to the operator (they say which part is wrong); other types' are not (they are
// strconv's, and "want a duration such as 60s" says more).
type wanter interface{ want() string }

// redacter is a field type whose raw value must not be repeated in errors as is.
type redacter interface{ redact(string) string }

// secret is a value never repeated in errors or logs.
type secret string

func (secret) redact(string) string { return "xxxxx" }

func (s secret) String() string {
	if s == "" {
		return ""
	}
	return "xxxxx"
}

// LogValue keeps a secret out of structured logs too.
func (s secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// configField is one variable of Config, from its tags.
type configField struct {
	index []int
	key   string // GATE_WINDOW
	def   string
}

// configFields lists Config's variables in declaration order. The key is built as
// envconfig builds it for a field with an envconfig tag: prefix, "_", tag, upper-cased.
// The structs Config embeds are not variables: their fields are, as envconfig flattens
// them, in the same order.
func configFields() []configField {
	visible := reflect.VisibleFields(reflect.TypeFor[Config]())
	out := make([]configField, 0, len(visible))
	for _, sf := range visible {
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			continue // a part of Config (Kafka, ...): its fields follow, as envconfig reads them
		}
		name := sf.Tag.Get("envconfig")
		if name == "" {
			panic(fmt.Sprintf("gate: Config.%s has no envconfig tag", sf.Name)) // caught by the tests
		}
		out = append(out, configField{
			index: sf.Index,
			key:   strings.ToUpper(envPrefix + "_" + name),
			def:   sf.Tag.Get("default"),
		})
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// noVariable is the name under which decode hands a value to envconfig.Process: no
// environment variable can have it, as a name ends at its first '='.
const noVariable = "="

// decode parses s into v, a field of Config, with envconfig.Process: it calls the
// field type's Decode (or UnmarshalText) or parses a duration, number or boolean. Process
// reads the process environment only, so the value reaches it as the default of a
// one-field spec whose variable cannot be set; and one field at a time, as Process stops
// at the first error. Two rules are the gate's own: whole numbers are decimal (Process
// would read "010" as 8 and "0x10" as 16), and numbers are finite.
func decode(v reflect.Value, s string) error {
	_, decoder := v.Addr().Interface().(envconfig.Decoder)
	_, unmarshaler := v.Addr().Interface().(encoding.TextUnmarshaler)
	if v.CanInt() && v.Type() != durationType && !decoder && !unmarshaler {
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		s = strconv.FormatInt(n, 10) // "010" as 10, which base 0 reads as 10 too
	}
	spec := reflect.New(reflect.StructOf([]reflect.StructField{{
		Name: "V",
		Type: v.Type(),
		Tag:  reflect.StructTag(`envconfig:"` + noVariable + `" default:` + strconv.Quote(s)),
	}}))
	if err := envconfig.Process("", spec.Interface()); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return pe.Err // the type's own words; Process's name Go types
		}
		return err
	}
	got := spec.Elem().Field(0)
	if got.CanFloat() && (math.IsNaN(got.Float()) || math.IsInf(got.Float(), 0)) {
		return errors.New("not a finite number")
	}
	v.Set(got)
	return nil
}

// wantFor says, for an error message, what a valid value of v's type looks like.
func wantFor(v reflect.Value, def string) string {
	if w, ok := v.Addr().Interface().(wanter); ok {
		return w.want()
	}
	switch {
	case v.Type() == reflect.TypeFor[limit.Mode]():
		return "divert or cap"
	case v.Type() == durationType:
		if def == "" || def == "0" {
			def = "120s"
		}
		return "a duration such as " + def
	case v.CanInt():
		return "a whole number such as " + def
	case v.CanFloat():
		return "a number such as " + def
	case v.Kind() == reflect.Bool:
		return "true or false"
	}
	return "a string"
}

func durationExample(key string) string {
	for _, f := range configFields() {
		if f.key == envPrefix+"_"+key && f.def != "0" && f.def != "" {
			return f.def
		}
	}
	return "1s"
}

func validPort(s string) bool {
	// Digits only: strconv takes "+80" and "-0", which Go's net package then listens on
	// or dials as ports 80 and 0, forms no operator means and no other tool reads alike.
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return false
	}
	n, err := strconv.Atoi(s)
	return err == nil && n <= 65535
}
