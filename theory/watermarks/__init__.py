"""Source watermarks (perfect, heuristic), their spec grammar, percentile watermarks and holds."""
