module maxprocs

go 1.25
