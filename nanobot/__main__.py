from nanobot.cli.app import main

main()
