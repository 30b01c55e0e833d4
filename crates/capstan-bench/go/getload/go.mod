module capstan.dev/bench/getload

go 1.19
