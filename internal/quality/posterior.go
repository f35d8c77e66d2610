package quality

import "math"

// The posterior of a contributor's accuracy. The stored trust (K +
// correct) / (2K + answered) is the mean of a Beta(K + correct, K +
// wrong) distribution: the posterior of the probability that they answer
// a test question right, from a Beta(K, K) prior (K = 0.5 is Jeffreys'
// prior) and their answers. The flag and the test-question rate look at
// the whole of it, not only its mean: how likely is it that their
// accuracy is under MinTrust, given how many test questions this is
// known from.

// ProbBelow is the posterior probability that the contributor's accuracy
// on test questions is under x: the Beta(K + correct, K + wrong)
// distribution function at x, with K = TrustSmoothing. Agreement with
// finalized results is not in it: it counts test questions only (known
// answers).
func (s Settings) ProbBelow(t Trust, x float64) float64 {
	k := s.TrustSmoothing
	return betaCDF(x, k+float64(t.TestsCorrect), k+float64(t.TestsAnswered-t.TestsCorrect))
}

// betaCDF is the regularized incomplete beta function I_x(a, b), the
// distribution function of Beta(a, b) at x, for a, b > 0. It evaluates
// the continued fraction of I_x(a, b) (DLMF 8.17.22) by the modified
// Lentz method where it converges fast, x < (a+1)/(a+b+2), and uses
// I_x(a, b) = 1 − I_{1−x}(b, a) elsewhere.
func betaCDF(x, a, b float64) float64 {
	switch {
	case math.IsNaN(x) || a <= 0 || b <= 0:
		return math.NaN()
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	case x > (a+1)/(a+b+2):
		return 1 - betaCDF(1-x, b, a)
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	// x^a (1−x)^b / (a B(a, b)), in logarithms.
	front := math.Exp(a*math.Log(x) + b*math.Log1p(-x) + lab - la - lb - math.Log(a))
	return front * betaFraction(x, a, b)
}

// betaFraction is 1 / (1 + d1 / (1 + d2 / (1 + …))) with
//
//	d(2m+1) = −(a+m)(a+b+m) x / ((a+2m)(a+2m+1))
//	d(2m)   = m(b−m) x / ((a+2m−1)(a+2m))
//
// evaluated from the front (the modified Lentz method: f is multiplied by
// C·D at each term, C = 1 + d/C and D = 1/(1 + d·D)) until a term changes
// f by less than the precision of a float64.
func betaFraction(x, a, b float64) float64 {
	const tiny, eps, steps = 1e-300, 1e-15, 10000
	guard := func(v float64) float64 {
		if math.Abs(v) < tiny {
			return tiny
		}
		return v
	}
	term := func(i int) float64 {
		m := float64(i / 2)
		if i%2 == 1 {
			return -(a + m) * (a + b + m) * x / ((a + 2*m) * (a + 2*m + 1))
		}
		return m * (b - m) * x / ((a + 2*m - 1) * (a + 2*m))
	}
	c, d := 1.0, 1/guard(1+term(1))
	f := d
	for i := 2; i <= steps; i++ {
		di := term(i)
		d = 1 / guard(1+di*d)
		c = guard(1 + di/c)
		f *= c * d
		if math.Abs(c*d-1) < eps {
			break
		}
	}
	return f
}
