package docket

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

type (
	noFields       struct{}
	someFields     struct{ A, B int }
	pointerDecoder struct{ Set bool }
	valueDecoder   struct{ set *bool }
	textDecoder    struct{ S string }
	objectMap      map[string]int
	fromDecoder    struct{ Set bool }
)

func (d *pointerDecoder) UnmarshalJSON([]byte) error { d.Set = true; return nil }
func (d valueDecoder) UnmarshalJSON([]byte) error    { *d.set = true; return nil }
func (d *textDecoder) UnmarshalText([]byte) error    { return errors.New("not text") }

// UnmarshalJSONFrom stands for jsonv2's json.UnmarshalerFrom, which
// json.Unmarshal honours under GOEXPERIMENT=jsonv2 (not in this build, so
// it is not checked against json.Unmarshal below).
func (d *fromDecoder) UnmarshalJSONFrom(any) error { d.Set = true; return nil }

// A handler skips decoding a payload of {} exactly for the types json
// decodes it into as nothing at all: no error, the zero value left as it
// is.
func TestEmptyObjectIsZero(t *testing.T) {
	check := func(t *testing.T, skips bool, decode func() (changed bool, err error)) {
		t.Helper()
		changed, err := decode()
		require.Equal(t, err == nil && !changed, skips, "json: err %v, changed %v", err, changed)
	}
	unmarshal := func(v any) (bool, error) {
		zero := reflect.New(reflect.TypeOf(v).Elem()).Elem().Interface()
		err := json.Unmarshal([]byte(`{}`), v)
		return !reflect.DeepEqual(reflect.ValueOf(v).Elem().Interface(), zero), err
	}
	t.Run("no fields", func(t *testing.T) {
		check(t, emptyObjectIsZero[noFields](), func() (bool, error) { return unmarshal(new(noFields)) })
	})
	t.Run("fields", func(t *testing.T) {
		check(t, emptyObjectIsZero[someFields](), func() (bool, error) { return unmarshal(new(someFields)) })
	})
	t.Run("UnmarshalJSON on the pointer", func(t *testing.T) {
		check(t, emptyObjectIsZero[pointerDecoder](), func() (bool, error) { return unmarshal(new(pointerDecoder)) })
	})
	t.Run("UnmarshalJSON on the value", func(t *testing.T) {
		set := false
		v := valueDecoder{set: &set}
		check(t, emptyObjectIsZero[valueDecoder](), func() (bool, error) {
			err := json.Unmarshal([]byte(`{}`), &v)
			return set, err
		})
	})
	t.Run("UnmarshalText", func(t *testing.T) {
		check(t, emptyObjectIsZero[textDecoder](), func() (bool, error) { return unmarshal(new(textDecoder)) })
	})
	t.Run("map", func(t *testing.T) {
		check(t, emptyObjectIsZero[objectMap](), func() (bool, error) { return unmarshal(new(objectMap)) })
	})
	require.False(t, emptyObjectIsZero[fromDecoder](), "a type with UnmarshalJSONFrom is decoded")
	require.True(t, emptyObjectIsZero[noFields]())
	require.True(t, emptyObjectIsZero[someFields]())
}
