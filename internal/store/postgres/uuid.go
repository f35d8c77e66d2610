package postgres

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidCodec is pgx's uuid codec taught github.com/google/uuid.UUID, the
// id type of every table. Without it pgx sees a driver.Valuer: every
// argument became a 36-character string that pgx then parsed back into
// 16 bytes, and every scanned id went through sql.Scanner and a string —
// about a tenth of the server's CPU on the crowd hot path (a dozen ids a
// judgment). The wire format and the values are the same.
type uuidCodec struct{ pgtype.UUIDCodec }

// registerUUID replaces the uuid type of m (and the element type of
// uuid[]) with uuidCodec.
func registerUUID(m *pgtype.Map) {
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(t)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
}

// PlanEncode implements pgtype.Codec.
func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(uuid.UUID); ok {
		if format == pgtype.BinaryFormatCode {
			return encodeUUIDBinary{}
		}
		return encodeUUIDText{}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

// PlanScan implements pgtype.Codec.
func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok {
		if format == pgtype.BinaryFormatCode {
			return scanUUIDBinary{}
		}
		return scanUUIDText{}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

type encodeUUIDBinary struct{}

func (encodeUUIDBinary) Encode(value any, buf []byte) ([]byte, error) {
	id := value.(uuid.UUID)
	return append(buf, id[:]...), nil
}

type encodeUUIDText struct{}

func (encodeUUIDText) Encode(value any, buf []byte) ([]byte, error) {
	return append(buf, value.(uuid.UUID).String()...), nil
}

type scanUUIDBinary struct{}

// Scan leaves the target as it is on NULL, as uuid.UUID's sql.Scanner did.
func (scanUUIDBinary) Scan(src []byte, dst any) error {
	if src == nil {
		return nil
	}
	if len(src) != 16 {
		return fmt.Errorf("invalid length for uuid: %d", len(src))
	}
	copy(dst.(*uuid.UUID)[:], src)
	return nil
}

type scanUUIDText struct{}

func (scanUUIDText) Scan(src []byte, dst any) error {
	if src == nil {
		return nil
	}
	id, err := uuid.ParseBytes(src)
	if err != nil {
		return err
	}
	*dst.(*uuid.UUID) = id
	return nil
}
