# frozen_string_literal: true

require "net/http"
require "tmpdir"

# A real Puma serving a rackup file on a free loopback port, with the gem on its load path,
# stopped by pid. Its log is kept (and named in failures) unless the test passed.
class PumaServer
  attr_reader :port, :log

  def initialize(rackup, env, workers: 0, threads: "1:4")
    @port = RedisServer.free_port
    @log = File.join(Dir.tmpdir, "rk-puma-#{@port}.log")
    env = env.merge("RUBYLIB" => [File.expand_path("../../lib", __dir__), ENV["RUBYLIB"]].compact.join(":"))
    argv = ["puma", "-b", "tcp://127.0.0.1:#{@port}", "-t", threads]
    argv += ["-w", workers.to_s] if workers.positive?
    @pid = Process.spawn(env, *argv, rackup, out: @log, err: @log)
    wait_until_serving
  rescue StandardError
    stop
    raise
  end

  def stop(keep_log: false)
    if @pid
      begin
        Process.kill("TERM", @pid)
        Process.wait(@pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil # puma had exited already (its log says why)
      end
      @pid = nil
    end
    File.delete(@log) if !keep_log && @log && File.exist?(@log)
  end

  private

  def wait_until_serving
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    loop do
      Net::HTTP.get_response(URI("http://127.0.0.1:#{@port}/health"))
      return
    rescue SystemCallError, EOFError
      raise "puma did not start:\n#{File.read(@log)}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.1
    end
  end
end
