from nanobot.cli.entry import main

main()
