# frozen_string_literal: true

module Ratekeeper
  # Base class of every error ratekeeper raises. `status` is the C library's status name
  # (`"RK_INVALID_ARGUMENT"`, ...), nil for errors raised by the gem itself.
  class Error < StandardError
    attr_reader :status

    def initialize(message = nil, status: nil)
      super(message)
      @status = status
    end
  end

  # The limit is reached and waiting (if any) did not help (HTTP 429). `retry_after` is the
  # exact number of seconds until the same call could succeed; `limiter` the limiter that
  # refused (the Sidekiq middleware reads its `reschedule:`).
  class OverLimit < Error
    attr_reader :retry_after, :limiter

    def initialize(message = "over limit", retry_after: 0.0, limiter: nil, status: "RK_OVER_LIMIT")
      super(message, status: status)
      @retry_after = retry_after
      @limiter = limiter
    end
  end

  # A load shedder dropped the call to protect the service (HTTP 503, not 429).
  class Shed < Error; end

  # A lease was released or extended after it had been reclaimed (it outlived its
  # `lock_timeout`) or the limiter was reset.
  class LeaseLost < Error; end

  # An argument is out of range, malformed or of the wrong type; nothing was written.
  # `parameter` is the argument's name as the Ruby caller spells it (`count`, `key`, ...).
  class InvalidArgument < Error
    attr_reader :parameter

    def initialize(message = nil, parameter: nil, status: "RK_INVALID_ARGUMENT")
      super(message, status: status)
      @parameter = parameter
    end
  end

  # The backend could not answer (Redis down, memory backend full, ...).
  class BackendUnavailable < Error; end

  # A backend call did not finish within its deadline. (Not `Timeout`, which would hide Ruby's
  # `::Timeout` inside this namespace.)
  class TimeoutError < Error; end

  # Redis answered, refusing the call for a reason an operator must fix (NOPERM, WRONGPASS,
  # OOM, a script error). Never turned into an admission by a failure policy.
  class BackendRejected < Error; end

  # A bug inside the library (a caught panic), or a status this gem does not know yet.
  class InternalError < Error; end

  # C status name => the Ruby class that carries it.
  ERROR_CLASSES = {
    "RK_OVER_LIMIT" => OverLimit, "RK_SHED" => Shed, "RK_LEASE_LOST" => LeaseLost,
    "RK_INVALID_ARGUMENT" => InvalidArgument, "RK_NULL_PARAMETER" => InvalidArgument,
    "RK_INVALID_UTF8" => InvalidArgument, "RK_BACKEND_UNAVAILABLE" => BackendUnavailable,
    "RK_TIMEOUT" => TimeoutError, "RK_BACKEND_REJECTED" => BackendRejected
  }.freeze

  # Raises the error a non-OK status stands for, with the library's message. `rename` maps the
  # C parameter names the message uses to the Ruby ones where they differ (`limit` => `count`
  # in the Sidekiq-style constructors).
  def self.check_status!(status, rename = nil)
    return if status == Native::OK

    name = Native.rk_status_name(status)
    message = Native.last_error_message
    klass = ERROR_CLASSES.fetch(name, InternalError)
    if klass == InvalidArgument
      parameter = message[/`([^`]+)`/, 1]
      if rename && parameter && (ruby = rename[parameter])
        message = message.sub("`#{parameter}`", "`#{ruby}`")
        parameter = ruby
      end
      raise InvalidArgument.new("#{name}: #{message}", parameter: parameter, status: name)
    end
    raise klass.new("#{name}: #{message}", status: name) unless klass == OverLimit

    raise OverLimit.new("#{name}: #{message}", status: name)
  end

  # Raises InvalidArgument naming `parameter`, as the library would.
  def self.invalid!(parameter, message)
    raise InvalidArgument.new("RK_INVALID_ARGUMENT: `#{parameter}` #{message}", parameter: parameter.to_s)
  end
end
