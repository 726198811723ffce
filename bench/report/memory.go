package main

import (
	"fmt"
	"math"
)

// Heap per cached team (internal/limit TestMemoryPerTeam's lines, read by Parse).

// memoryFigures puts the heap per cached team, short teams and long.
func memoryFigures(p *Parsed, out map[string]float64) {
	if !math.IsNaN(p.BytesPerEntity) {
		out["bytes_per_entity"] = p.BytesPerEntity
	}
	for n, v := range p.BytesPerLongEntity {
		out[fmt.Sprintf("bytes_per_entity_%db_teams", n)] = v
	}
}
