module github.com/shardflow/shardflow

go 1.26
