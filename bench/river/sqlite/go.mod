module github.com/docket-run/docket/bench/river/sqlite

go 1.26.8

replace (
	github.com/docket-run/docket => ../../..
	github.com/docket-run/docket/bench/river => ..
)

require (
	github.com/docket-run/docket/bench/river v0.0.0
	github.com/riverqueue/river/riverdriver/riversqlite v0.31.0
	modernc.org/sqlite v1.61.1
)

require (
	github.com/docket-run/docket v0.0.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/riverqueue/river v0.31.0 // indirect
	github.com/riverqueue/river/riverdriver v0.31.0 // indirect
	github.com/riverqueue/river/rivershared v0.31.0 // indirect
	github.com/riverqueue/river/rivertype v0.31.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	github.com/tidwall/gjson v1.18.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	modernc.org/libc v1.79.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)
