// Command insertprobe measures docket's bulk insert alone, per job: wall
// time, the process's CPU and the PostgreSQL cluster's CPU (the postmaster
// and every process it forked, read from /proc: run it on the cluster's
// machine). It inserts --jobs no-op jobs --batch per InsertMany from one
// client, as the first phase of `docket bench --mode burn` does, on a
// database it resets first (every docket table there is emptied).
//
//	go run ./bench/insertprobe --database-url postgres://postgres@127.0.0.1:54344/probe --reps 5
//
// Lines: jobs/s, then µs per job of wall, client CPU, server CPU and (of
// that) the client's own backends' CPU, the WAL bytes per job and the cluster's WAL flushes during the inserts with
// their mean time (pg_stat_wal: the time is 0 unless the cluster sets
// track_wal_io_timing).
//
// --setup runs SQL after each rep's migrations, before its inserts: a
// schema variant to alternate with the plain schema, one probe each.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docket-run/docket"
	"github.com/docket-run/docket/internal/bench"
)

type noop struct{}

func (noop) JobType() string { return "bench.noop" }

func main() {
	url := flag.String("database-url", "", "PostgreSQL database (it is reset)")
	jobs := flag.Int("jobs", 200000, "jobs per rep")
	batch := flag.Int("batch", 5000, "jobs per InsertMany")
	reps := flag.Int("reps", 3, "repetitions (the database is reset before each)")
	profile := flag.String("cpuprofile", "", "write the process's CPU profile here")
	setup := flag.String("setup", "", "SQL run after the migrations of each rep, before its inserts (a variant's schema change)")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	c, err := docket.NewClient(ctx, docket.Config{DatabaseURL: *url})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	conn, err := pgx.Connect(ctx, *url)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	pm := postmaster(ctx, conn)
	for r := 0; r < *reps; r++ {
		if _, err := c.Migrate(ctx, docket.MigrateDown, 0); err != nil {
			log.Fatal(err)
		}
		if _, err := c.Migrate(ctx, docket.MigrateUp, 0); err != nil {
			log.Fatal(err)
		}
		if *setup != "" {
			if _, err := conn.Exec(ctx, *setup); err != nil {
				log.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			log.Fatal(err)
		}
		backends := clientBackends(ctx, conn)
		ps := make([]docket.InsertParams, *batch)
		for i := range ps {
			ps[i].Args = noop{}
		}
		w0 := walStats(ctx, conn)
		s0, c0, b0, t0 := clusterCPU(pm), bench.SelfCPU(), backendsCPU(backends), time.Now()
		for n := *jobs; n > 0; n -= *batch {
			if _, err := c.InsertMany(ctx, ps[:min(n, *batch)]); err != nil {
				log.Fatal(err)
			}
		}
		wall, cl, sv, bk := time.Since(t0), bench.SelfCPU()-c0, clusterCPU(pm)-s0, backendsCPU(backends)-b0
		per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(*jobs) }
		w1 := walStats(ctx, conn)
		fmt.Printf("jobs/s %.0f  wall %.2f µs  client %.2f µs  server %.2f µs (backends %.2f)  WAL %.0f B, %d syncs of %.2f ms\n",
			float64(*jobs)/wall.Seconds(), per(wall), per(cl), per(sv), per(bk),
			(w1.bytes-w0.bytes)/float64(*jobs), w1.syncs-w0.syncs, (w1.syncMs-w0.syncMs)/float64(max(1, w1.syncs-w0.syncs)))
	}
	// The client's backends, for a profiler's pid filter.
	fmt.Fprintln(os.Stderr, "backends:", clientBackends(ctx, conn))
}

// postmaster is the cluster's postmaster pid, from its data directory.
func postmaster(ctx context.Context, c *pgx.Conn) int {
	var dir string
	if err := c.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		log.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		log.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		log.Fatal(err)
	}
	return pid
}

// clusterCPU is the CPU of pid and its children, living and reaped.
func clusterCPU(pid int) time.Duration {
	tick := 100.0
	total := 0.0
	add := func(p string, reaped bool) {
		b, err := os.ReadFile(p)
		if err != nil {
			return
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		// after the name: state ppid …; utime, stime, cutime, cstime at 11–14
		for _, k := range []int{11, 12} {
			v, _ := strconv.ParseFloat(f[k], 64)
			total += v
		}
		if reaped {
			for _, k := range []int{13, 14} {
				v, _ := strconv.ParseFloat(f[k], 64)
				total += v
			}
		}
	}
	add(fmt.Sprintf("/proc/%d/stat", pid), true)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if f[1] == strconv.Itoa(pid) {
			add("/proc/"+e.Name()+"/stat", false)
		}
	}
	return time.Duration(total / tick * float64(time.Second))
}

var warnSchedstat sync.Once

// clientBackends are the pids of the client's connections: this
// database's backends but the probe's own.
func clientBackends(ctx context.Context, c *pgx.Conn) []int32 {
	rows, err := c.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
	if err != nil {
		log.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		log.Fatal(err)
	}
	return pids
}

// backendsCPU is the CPU the processes pids have run (bench.ProcessCPU).
// A pid it cannot read (the server is not on this machine, or in a
// container of its own) is reported once on stderr and counts 0.
func backendsCPU(pids []int32) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		d, err := bench.ProcessCPU(int(pid))
		if err != nil {
			warnSchedstat.Do(func() { log.Printf("backends' CPU not counted: %v", err) })
			continue
		}
		total += d
	}
	return total
}

// walCounters are the cluster's pg_stat_wal totals.
type walCounters struct {
	bytes  float64
	syncs  int64
	syncMs float64
}

func walStats(ctx context.Context, c *pgx.Conn) walCounters {
	var w walCounters
	if err := c.QueryRow(ctx, "SELECT wal_bytes::float8, wal_sync, wal_sync_time FROM pg_stat_wal").Scan(&w.bytes, &w.syncs, &w.syncMs); err != nil {
		log.Fatal(err)
	}
	return w
}
