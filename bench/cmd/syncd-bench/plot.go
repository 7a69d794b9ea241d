package main

func writePlot(path string, pts []pagePoint, limit float64, rows int) error { return nil }
