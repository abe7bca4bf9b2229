from runner.launch import main

main()
