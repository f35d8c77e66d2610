package crowd

import "slices"

// ReasonMissingSkill is the NotEligibleError reason of a contributor who
// lacks a skill the pool requires or shares none of its channels.
const ReasonMissingSkill = "a skill or a channel the pool requires is missing"

// SkillsMatch reports whether a contributor with skills and channels may
// work on a pool requiring poolSkills and poolChannels: every skill the
// pool requires is among theirs, and they share a channel with it (or it
// requires none). The stores' takes check the same in their own terms
// (PostgreSQL: skills @> pool skills AND channels && pool channels).
func SkillsMatch(poolSkills, poolChannels, skills, channels []string) bool {
	for _, s := range poolSkills {
		if !slices.Contains(skills, s) {
			return false
		}
	}
	if len(poolChannels) == 0 {
		return true
	}
	for _, ch := range poolChannels {
		if slices.Contains(channels, ch) {
			return true
		}
	}
	return false
}
