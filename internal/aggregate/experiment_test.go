package aggregate

import (
	"fmt"
	"os"
	"testing"
)

type variant struct {
	name string
	run  func(x *index, opts Options) *Result
}

func expScore(t *testing.T, vs []variant) {
	d1 := loadDataset(t, "d_product")
	d2 := loadDataset(t, "d_possent")
	type crowd struct {
		in    []Judgment
		truth map[string]string
	}
	var crowds []crowd
	for _, tc := range [][5]int{{1, 3000, 400, 5, 3}, {2, 3000, 1500, 5, 4}, {3, 2000, 300, 3, 4}} {
		in, tr := synthetic(uint64(tc[0]), tc[1], tc[2], tc[3], tc[4])
		crowds = append(crowds, crowd{in, tr})
	}
	for _, v := range vs {
		line := fmt.Sprintf("%-40s", v.name)
		for _, d := range []dataset{d1, d2} {
			opts := Options{}.WithDefaults()
			x, err := newIndex(d.judgments, opts)
			if err != nil {
				t.Fatal(err)
			}
			res := v.run(x, opts)
			c, n := accuracy(res, d.truth)
			line += fmt.Sprintf(" %5d/%d %.2f (%d it)", c, n, 100*float64(c)/float64(n), res.Iterations)
		}
		for _, cr := range crowds {
			opts := Options{}.WithDefaults()
			x, _ := newIndex(cr.in, opts)
			res := v.run(x, opts)
			c, n := accuracy(res, cr.truth)
			line += fmt.Sprintf(" %.2f", 100*float64(c)/float64(n))
		}
		t.Log(line)
	}
}

func TestExperiment(t *testing.T) {
	if os.Getenv("AGG_EXP") == "" {
		t.Skip()
	}
	vs := []variant{
		{"ds", func(x *index, o Options) *Result { return dawidSkene(MethodDS, x, o) }},
		{"zencrowd", func(x *index, o Options) *Result { return dawidSkene(MethodZenCrowd, x, o) }},
	}
	avg := func(a, b *Result, x *index) *Result {
		k := x.nClasses()
		post := make([]float64, len(x.items)*k)
		for i := range x.items {
			for c := 0; c < k; c++ {
				post[i*k+c] = (a.Items[i].Distribution[c] + b.Items[i].Distribution[c]) / 2
			}
		}
		r := newResult(x, post)
		r.Iterations = a.Iterations + b.Iterations
		return r
	}
	vs = append(vs, variant{"avg(ds,zencrowd)", func(x *index, o Options) *Result {
		return avg(dawidSkene(MethodDS, x, o), dawidSkene(MethodZenCrowd, x, o), x)
	}})
	vs = append(vs, variant{"ds from zencrowd", func(x *index, o Options) *Result {
		z := dawidSkene(MethodZenCrowd, x, o)
		post := make([]float64, 0, len(x.items)*x.nClasses())
		for _, it := range z.Items {
			post = append(post, it.Distribution...)
		}
		return runEMFrom(MethodDS, x, o, smoothingDefault, post)
	}})
	for _, vb := range []bool{false, true} {
		cfg := hierDefault
		cfg.vb, cfg.precisionOnly = vb, true
		vs = append(vs, variant{fmt.Sprintf("hier precision-only vb=%v", vb), func(x *index, o Options) *Result {
			r, a := hierDS(x, o, cfg)
			t.Logf("  alpha %.3g", a)
			return r
		}})
	}
	for _, mc := range []maceConfig{} {
		vs = append(vs, variant{fmt.Sprintf("mace %v", mc), func(x *index, o Options) *Result { return mace(x, o, mc) }})
	}
	for seed := uint64(0); seed < 0; seed++ {
		cfg := ebccDefault
		if seed > 0 {
			cfg.seed = seed
		}
		vs = append(vs, variant{fmt.Sprintf("ebcc seed %d", cfg.seed), func(x *index, o Options) *Result {
			return ebcc(x, o, cfg)
		}})
		vs = append(vs, variant{fmt.Sprintf("avg(ds,ebcc) seed %d", cfg.seed), func(x *index, o Options) *Result {
			return avg(dawidSkene(MethodDS, x, o), ebcc(x, o, cfg), x)
		}})
	}
	for _, vb := range []bool{} {
		for _, pc := range []float64{1, 0} {
			cfg := hierDefault
			cfg.vb, cfg.priorCount = vb, pc
			vs = append(vs, variant{fmt.Sprintf("hier vb=%v prior=%v", vb, pc), func(x *index, o Options) *Result {
				r, a := hierDS(x, o, cfg)
				t.Logf("  alpha %.3g", a)
				return r
			}})
		}
	}
	expScore(t, vs)
}
